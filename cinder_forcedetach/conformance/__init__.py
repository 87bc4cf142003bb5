#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""A conformance kit for drivers built on ForceDetachMixin.

Storage vendors run it on their own subclass of
:class:`cinder_forcedetach.mixin.ForceDetachMixin`::

    python -m cinder_forcedetach.conformance \\
        --driver mycompany.drivers.MyArrayDriver \\
        --config /etc/cinder/cinder.conf --backend mybackend \\
        --probe mycompany.probe.MyProbe

It starts Cinder's API, scheduler and volume service in-process
(:mod:`.harness`) with the vendor's driver and backend options, runs the
checks of :mod:`.suite` (rules R1..R9, each check named after its rule)
and prints a summary table (:mod:`.runner`).  What the backend really has
is read through the vendor's :class:`.probe.AccessProbe`, which also makes
each attached host a live client where the protocol has them (tgt: a
qemu-io/libiscsi session, :mod:`.initiator`; RBD: a librbd client).  See
``doc/vendor-guide.md``.
"""
