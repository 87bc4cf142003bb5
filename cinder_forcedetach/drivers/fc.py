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

"""Fibre Channel driver: LUN masking on an array, zoning by Cinder's FCZM.

``volume_driver = cinder_forcedetach.drivers.fc.FibreChannelDriver``

Volumes are sparse raw files (:mod:`cinder_forcedetach.drivers.common`); an
:class:`~cinder_forcedetach.arrays.base.FCArray` (the SQLite reference array
unless :meth:`FibreChannelDriver.create_array` is overridden) masks them to
hosts.  As in-tree FC drivers do, ``initialize_connection`` maps the LUN and
adds zones with ``cinder.zonemanager.utils.add_fc_zone``; revoking a host
unmaps the LUN and removes the zones of its initiators with
``remove_fc_zone`` only when no other LUN of that host remains on the
array.  Force-detach (the mixin's flow) disconnects this host with os-brick's
FC connector (force, ignore errors), unmaps, removes zones, and only then
resets Cinder's database.
"""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any, Iterable, Optional, Sequence, TYPE_CHECKING

from cinder.common import constants
from cinder import coordination
from cinder import exception
from cinder.i18n import _
from cinder import interface
from cinder.zonemanager import utils as fczm_utils
from oslo_log import log as logging
from oslo_utils import excutils

from cinder_forcedetach.arrays import base as array_base
from cinder_forcedetach.arrays import sqlite as array_sqlite
from cinder_forcedetach.drivers import common
from cinder_forcedetach import host_access
from cinder_forcedetach import mixin

if TYPE_CHECKING:
    from cinder import context as cinder_context
    from cinder import objects
    from oslo_config import cfg
    from tooz import locking

LOG = logging.getLogger(__name__)

fc_opts = array_sqlite.fc_opts

_HOST_NAME_RE = re.compile(r'[^A-Za-z0-9_.-]+')


@interface.volumedriver
class FibreChannelDriver(mixin.ForceDetachMixin, common.FileVolumeDriver):
    """Sparse-file volumes masked to FC hosts, with safe force-detach."""

    VERSION = '1.0.0'
    DEFAULT_BACKEND_NAME = 'fc_forcedetach'
    protocol = constants.FC

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super(FibreChannelDriver, self).__init__(*args, **kwargs)
        self.configuration.append_config_values(fc_opts)
        # None until do_setup, which Cinder runs before any other call.
        self.array: array_base.FCArray = None  # type: ignore[assignment]
        self._lookup_service = fczm_utils.create_lookup_service()

    @staticmethod
    def get_driver_options() -> list[cfg.Opt]:
        return (mixin.ForceDetachMixin.get_driver_options() +
                common.volume_file_opts + fc_opts)

    # -- setup ---------------------------------------------------------------

    def create_array(self) -> array_base.FCArray:
        """The array of this backend; a vendor subclass returns its own."""
        conf = self.configuration
        try:
            return array_sqlite.from_config(conf)
        except ValueError as err:
            raise exception.InvalidConfigurationValue(
                option='forcedetach_fc_target_wwpns (%s)' % err,
                value=conf.forcedetach_fc_target_wwpns)

    def do_setup(self, context: cinder_context.RequestContext) -> None:
        super(FibreChannelDriver, self).do_setup(context)
        self.array = self.create_array()
        self.array.setup()

    def check_for_setup_error(self) -> None:
        """Fail when the array has no target port to offer."""
        if not self.array.target_ports():
            raise exception.VolumeDriverException(
                message=_('the FC array has no target ports: set '
                          'forcedetach_fc_target_wwpns'))

    def _masking_lock(self) -> locking.Lock:
        """Serialise masking and zoning of this array (all services)."""
        name = getattr(self.array, 'path', None) or self.backend_name
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        return coordination.COORDINATOR.get_lock(
            'cinder-forcedetach-fc-%s' % digest)

    def delete_volume(self, volume: objects.Volume) -> None:
        """Remove any LUN map left on the array, then the volume file."""
        if self.array.hosts_of_volume(volume.name):
            LOG.warning('Volume %s is still mapped on the array; removing '
                        'its LUN maps before deleting it.', volume.id)
            self.revoke_host_access(volume, None)
        super(FibreChannelDriver, self).delete_volume(volume)

    # -- connectors -----------------------------------------------------------

    def validate_connector(self, connector: dict[str, Any]) -> None:
        super(FibreChannelDriver, self).validate_connector(connector)
        self.connector_wwpns(connector)

    @staticmethod
    def connector_wwpns(connector: dict[str, Any]) -> list[str]:
        """The connector's WWPNs, normalised; InvalidConnector otherwise."""
        wwpns = connector.get('wwpns')
        if not isinstance(wwpns, (list, tuple)) or not wwpns:
            raise exception.InvalidConnectorException(
                missing='wwpns (a list of the host\'s FC HBA port WWPNs)')
        result, bad = [], []
        for wwpn in wwpns:
            try:
                value = array_base.normalize_wwpn(wwpn)
            except ValueError:
                bad.append(repr(wwpn))
                continue
            if value not in result:
                result.append(value)
        if bad:
            raise exception.InvalidConnectorException(
                missing=_('valid wwpns (16 hexadecimal digits each), got '
                          '%s') % ', '.join(bad))
        return result

    @staticmethod
    def array_host_name(connector: dict[str, Any],
                        wwpns: Sequence[str]) -> str:
        """Name of the array host created for a connector."""
        name = _HOST_NAME_RE.sub('-', connector.get('host') or '')
        name = name.strip('-')[:63]
        return name or 'wwpn-%s' % wwpns[0]

    def _initiator_target_map(self, wwpns: list[str], targets: list[str]
                              ) -> dict[str, list[str]]:
        """Which initiator reaches which target port (as zones are made)."""
        if not self._lookup_service:
            return {wwpn: list(targets) for wwpn in wwpns}
        it_map: dict[str, list[str]] = {}
        fabrics = self._lookup_service.get_device_mapping_from_network(
            wwpns, targets)
        for fabric in fabrics.values():
            for initiator in fabric['initiator_port_wwn_list']:
                ports = it_map.setdefault(initiator, [])
                ports.extend(p for p in fabric['target_port_wwn_list']
                             if p not in ports)
        return it_map

    def _connection_info(self, volume: objects.Volume, lun: int,
                         targets: Iterable[str],
                         it_map: dict[str, list[str]]) -> dict[str, Any]:
        return {'driver_volume_type': 'fibre_channel',
                'data': {'target_discovered': False,
                         'target_lun': lun,
                         'target_wwn': list(targets),
                         'initiator_target_map': it_map,
                         'volume_id': volume.id,
                         'discard': True}}

    # -- export (FC has none: access is LUN masking) --------------------------

    def create_export(self, context: cinder_context.RequestContext,
                      volume: objects.Volume,
                      connector: dict[str, Any]) -> None:
        """Nothing to export: initialize_connection maps the LUN."""

    def ensure_export(self, context: cinder_context.RequestContext,
                      volume: objects.Volume) -> None:
        """LUN maps live on the array and survive a service restart."""

    def remove_export(self, context: cinder_context.RequestContext,
                      volume: objects.Volume) -> None:
        """Nothing: Cinder calls it even while other hosts keep the LUN."""

    # -- connections ----------------------------------------------------------

    def initialize_connection(self, volume: objects.Volume,
                              connector: dict[str, Any]) -> dict[str, Any]:
        """Map the volume to the connector's host and zone its initiators."""
        wwpns = self.connector_wwpns(connector)
        targets = self.array.target_ports()
        with self._masking_lock():
            host = self.array.ensure_host(
                self.array_host_name(connector, wwpns), wwpns)
            was_mapped = host in self.array.hosts_of_volume(volume.name)
            lun = self.array.map_volume(volume.name, host)
            info = self._connection_info(
                volume, lun, targets,
                self._initiator_target_map(wwpns, targets))
            try:
                # The zone manager edits the lists it is given: pass a copy.
                fczm_utils.add_fc_zone(copy.deepcopy(info))
            except Exception:
                with excutils.save_and_reraise_exception():
                    if not was_mapped:
                        LOG.error('Zoning failed; unmapping volume %s from '
                                  'array host %s again.', volume.id, host)
                        self.array.unmap_volume(volume.name, host)
        LOG.info('Volume %(vol)s mapped to host %(host)s as LUN %(lun)d.',
                 {'vol': volume.id, 'host': host, 'lun': lun})
        return info

    # -- force-detach hooks ---------------------------------------------------

    def revoke_host_access(self, volume: objects.Volume,
                           connector: Optional[dict[str, Any]]) -> bool:
        """Unmap the volume from a host (all when None); remove idle zones.

        Zones of a host's initiators go only when the host has no LUN left
        on the array.  Hosts known from the volume's attachments are
        checked too, so a run interrupted after the unmap still removes
        their zones when re-run.  Returns True while other hosts keep
        the volume mapped.
        """
        wwpns = None if connector is None else self.connector_wwpns(connector)
        targets = self.array.target_ports()
        with self._masking_lock():
            if connector is None:
                hosts = set(self.array.hosts_of_volume(volume.name))
                hosts.update(self._attached_hosts(volume))
                remaining = self.array.unmap_volume(volume.name)
                initiators: dict[Optional[str], Optional[list[str]]] = {
                    h: self.array.host_wwpns(h) for h in hosts}
            else:
                # wwpns is the connector's (not None) in this branch.
                host = self.array.find_host(wwpns)  # type: ignore[arg-type]
                if host is None:
                    remaining = sorted(self.array.hosts_of_volume(volume.name))
                else:
                    remaining = self.array.unmap_volume(volume.name, host)
                initiators = {host: wwpns}
            for host in sorted(initiators, key=str):
                self.remove_zones(host, initiators[host], targets)
        return bool(remaining)

    def remove_zones(self, host: Optional[str],
                     wwpns: Optional[Sequence[str]],
                     targets: Optional[Sequence[str]] = None) -> bool:
        """Remove the zones of *wwpns* unless *host* still has a LUN.

        The map pairs every initiator with every target port instead of
        asking the lookup service: a dead host's HBAs are no longer logged
        in to the fabric, and its zones must go all the same.  Returns
        whether zones were removed.
        """
        if host is not None:
            luns = self.array.luns_of_host(host)
            if luns:
                LOG.info('Zones of array host %(host)s kept: %(n)d other '
                         'LUN(s) still mapped.', {'host': host,
                                                  'n': len(luns)})
                return False
        targets = self.array.target_ports() if targets is None else targets
        if not wwpns or not targets:
            return False
        LOG.info('Removing the zones of initiator(s) %s: no LUN of theirs '
                 'is left on the array.', ', '.join(wwpns))
        fczm_utils.remove_fc_zone(
            {'driver_volume_type': 'fibre_channel',
             'data': {'target_wwn': list(targets),
                      'initiator_target_map': {w: list(targets)
                                               for w in wwpns}}})
        return True

    def audit_holders(self) -> dict[str, list[host_access.Holder]]:
        """The array's LUN masking: a holder per mapped host (one read)."""
        return {volume: [_mapping_holder(host, wwpns)
                         for host, wwpns in sorted(hosts.items())]
                for volume, hosts in self.array.masking().items()}

    def volume_holders(self, volume: objects.Volume
                       ) -> list[host_access.Holder]:
        """The array hosts the volume's LUN is mapped to."""
        return [_mapping_holder(host, self.array.host_wwpns(host))
                for host in sorted(self.array.hosts_of_volume(volume.name))]

    def _attached_hosts(self, volume: objects.Volume) -> set[str]:
        """Array hosts of the FC connectors of the volume's attachments."""
        hosts = set()
        for attachment in volume.volume_attachment or []:
            connector = attachment.connector or {}
            try:
                wwpns = self.connector_wwpns(connector)
            except exception.InvalidConnectorException:
                continue
            host = self.array.find_host(wwpns)
            if host is not None:
                hosts.add(host)
        return hosts

    def local_connection_info(self, volume: objects.Volume,
                              connector: dict[str, Any]
                              ) -> Optional[dict[str, Any]]:
        """connection_info for this host while its LUN is still mapped."""
        try:
            wwpns = self.connector_wwpns(connector)
        except exception.InvalidConnectorException:
            return None
        host = self.array.find_host(wwpns)
        # No such array host (None): no LUN either.
        lun = self.array.hosts_of_volume(
            volume.name).get(host)  # type: ignore[arg-type]
        if lun is None:
            return None
        targets = self.array.target_ports()
        return self._connection_info(volume, lun, targets,
                                     {w: list(targets) for w in wwpns})


def _mapping_holder(host: str, wwpns: Sequence[str]) -> host_access.Holder:
    """The audit's holder of a LUN mapped to array host *host*."""
    return host_access.Holder(
        'mapping', frozenset('wwpn:%s' % host_access.normalize_wwpn(w)
                             for w in wwpns), host,
        {'host': host, 'wwpns': list(wwpns)})
