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

"""What the backend really has: the interface a vendor implements.

The kit never believes a hook's return value or Cinder's database about
access: it asks an :class:`AccessProbe`, which reads the backend itself
(target ACLs and sessions, LUN masking, watchers...).  A vendor writes one
for its backend and names it with ``--probe module.Class``; the class is
built without arguments.

Where access is a live client rather than a grant (RBD), the probe also
makes the clients: the kit calls :meth:`AccessProbe.connect` after each
attachment it makes and :meth:`AccessProbe.disconnect_all` when the
check ends.  Both are no-ops by default.

Ours: :class:`TgtProbe` (tgtd targets of
:class:`~cinder_forcedetach.drivers.iscsi.TgtISCSIDriver`),
:class:`FCArrayProbe` (LUN masking of
:class:`~cinder_forcedetach.drivers.fc.FibreChannelDriver`'s array) and
:class:`cinder_forcedetach.conformance.rbd_probe.RBDProbe` (watchers and
the OSD blocklist of :class:`~cinder_forcedetach.drivers.rbd.RBDDriver`'s
images, with a live librbd client per host).
"""

import importlib

from cinder_forcedetach.arrays import base as array_base


class AccessProbe(object):
    """Reads access to a volume from the backend, never from Cinder.

    Both methods get the volume service's driver instance (already set
    up), a Cinder ``Volume`` object and, for :meth:`host_has_access`, the
    connector of the host asked about (as the host sent it to Cinder; it
    may be hostile: never pass its fields to a shell).
    """

    def host_has_access(self, driver, volume, connector):
        """Can the host of *connector* reach *volume* now?

        True when the backend would let that host read or write the volume:
        it is granted (ACL entry, LUN mapped to its ports, ...), holds a
        live session or client, or the volume is open to every host.
        """
        raise NotImplementedError()

    def exported(self, driver, volume):
        """Does the backend still export or hold *volume* for anyone?

        False once ``revoke_host_access(volume, None)`` and
        ``remove_export`` have run: no target, no mapping, no client.
        """
        raise NotImplementedError()

    def connect(self, driver, volume, connector, connection_info):
        """Optional: make the host of *connector* a live client of *volume*.

        The kit calls it right after each attachment it makes through
        Cinder's API (attachment create with *connector*, then
        ``os-complete``), with the attachment's ``connection_info`` as the
        API returned it, before it asks :meth:`host_has_access`.  A backend
        where access is a session or client that the host itself opens
        (RBD: a librbd client holding the image) starts one here, as the
        host would; a raise fails the check's precondition.  Default:
        nothing (access is a grant the probe reads: ACL, LUN masking).
        """

    def disconnect_all(self):
        """Optional: stop every client :meth:`connect` started.

        Called when each check ends, before the kit deletes the check's
        volumes; must be idempotent.  Default: nothing.
        """


class TgtProbe(AccessProbe):
    """The volume's tgt target: ACL entries, address rules and sessions.

    Works for any driver with ``target`` (a
    :class:`~cinder_forcedetach.targets.base.ExportTarget`) and
    ``target_name(volume)``, as our tgt driver has.
    """

    @staticmethod
    def _state(driver, volume):
        return driver.target.find(driver.target_name(volume))

    def host_has_access(self, driver, volume, connector):
        state = self._state(driver, volume)
        if state is None:
            return False
        if state.address_acls:
            # initiator-address ALL (or an address or network): any
            # initiator name from there logs in.
            return True
        initiator = (connector or {}).get('initiator')
        return initiator in state.initiators

    def exported(self, driver, volume):
        return self._state(driver, volume) is not None


class FCArrayProbe(AccessProbe):
    """The array's LUN masking: hosts_of_volume and their WWPNs."""

    @staticmethod
    def _wwpns(connector):
        result = set()
        wwpns = (connector or {}).get('wwpns')
        if not isinstance(wwpns, (list, tuple)):
            return result
        for wwpn in wwpns:
            try:
                result.add(array_base.normalize_wwpn(wwpn))
            except (ValueError, TypeError, AttributeError):
                continue
        return result

    def host_has_access(self, driver, volume, connector):
        wwpns = self._wwpns(connector)
        array = driver.array
        for host in array.hosts_of_volume(volume.name):
            if wwpns.intersection(array.host_wwpns(host)):
                return True
        return False

    def exported(self, driver, volume):
        return bool(driver.array.hosts_of_volume(volume.name))


def load_class(path):
    """``module.Class`` (or ``module:Class``) -> the class."""
    module, sep, name = path.replace(':', '.').rpartition('.')
    if not sep or not module:
        raise ValueError('%r is not module.Class' % path)
    return getattr(importlib.import_module(module), name)


def load(probe):
    """A probe instance from an instance, a class or ``module.Class``."""
    if isinstance(probe, str):
        probe = load_class(probe)
    if isinstance(probe, type):
        probe = probe()
    for method in ('host_has_access', 'exported'):
        if not callable(getattr(probe, method, None)):
            raise TypeError('probe %r has no %s()' % (probe, method))
    return probe
