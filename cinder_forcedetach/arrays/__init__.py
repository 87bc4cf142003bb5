"""Storage arrays that mask LUNs to Fibre Channel hosts.

A driver never talks to an array's management API itself: it asks an
:class:`~cinder_forcedetach.arrays.base.FCArray` for hosts, LUN maps and
target ports, as :mod:`cinder_forcedetach.targets` does for iSCSI targets.
"""
