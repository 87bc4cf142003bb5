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

"""Per-volume tgt exports, and the Cinder target driver built on them.

:class:`VolumeExports` is what every driver of ours that exports through
``tgtd`` does to a volume (:mod:`cinder_forcedetach.targets.tgtadm` does the
``tgtadm`` work): one target per volume named ``target_prefix`` + volume
name, its LUN 1 on the volume's path, a CHAP account created anew whenever
the export is created, and one ACL entry per initiator.  Revoking a host
unbinds its ACL and closes its sessions (an ``initiator-address ALL`` rule
left by upstream's helper is first narrowed to the initiators Cinder
keeps); revoking every host takes the target offline first (tgtd then
refuses every login and command on it) and reads no other target;
removing the export removes target, LUN, sessions and CHAP account.
Every step is idempotent.  Used by
:class:`cinder_forcedetach.drivers.iscsi.TgtISCSIDriver` and, as a Cinder
target driver (:class:`TgtTarget`), by
:class:`cinder_forcedetach.drivers.lvm.LVMVolumeDriver`.
"""

from __future__ import annotations

import functools
from typing import Any, Optional, Sequence, TYPE_CHECKING

from cinder.common import constants
from cinder import exception
from cinder.i18n import _
from cinder.volume import configuration as cinder_configuration
from cinder.volume.targets import driver as target_driver
from cinder.volume import volume_utils
from oslo_config import cfg
from oslo_log import log as logging

from cinder_forcedetach import attachments as fd_attachments
from cinder_forcedetach import connector_grammar
from cinder_forcedetach import host_access
from cinder_forcedetach import locks
from cinder_forcedetach.targets import tgtadm

if TYPE_CHECKING:
    from cinder import context as cinder_context
    from cinder import objects

    from cinder_forcedetach.targets import base

LOG = logging.getLogger(__name__)

tgt_opts = [
    cfg.IntOpt('forcedetach_tgt_control_port',
               default=0, min=0, max=65535,
               help='Control port of the tgtd instance (tgtd -C N / '
                    'tgtadm -C N) that exports this backend.'),
    cfg.BoolOpt('forcedetach_chap_auth',
                default=True,
                help='Give every export its own CHAP account, created anew '
                     'whenever the export is created. Removing it is part '
                     'of what fences a force-detached initiator.'),
]

cfg.CONF.register_opts(tgt_opts,
                       group=cinder_configuration.SHARED_CONF_GROUP)

REQUIRED_CONNECTOR_FIELDS = ('initiator',)


def chap(volume: objects.Volume) -> tuple[Optional[str], Optional[str]]:
    """``(username, password)`` of the volume's export, or (None, None)."""
    parts = (volume['provider_auth'] or '').split()
    if len(parts) == 3 and parts[0] == 'CHAP':
        return parts[1], parts[2]
    return None, None


class VolumeExports(object):
    """One tgt target per volume, with its CHAP account and ACL.

    :param configuration: the backend's configuration (``target_prefix``,
        ``target_ip_address``, ``target_port``,
        ``target_secondary_ip_addresses`` and this module's options).
    :param target: the :class:`~cinder_forcedetach.targets.base.ExportTarget`
        (default: ``tgtadm`` on ``forcedetach_tgt_control_port``).
    """

    def __init__(self, configuration: Any,
                 target: Optional[tgtadm.TgtAdm] = None) -> None:
        configuration.append_config_values(tgt_opts)
        self.configuration = configuration
        self.target = target or tgtadm.TgtAdm(
            control_port=configuration.forcedetach_tgt_control_port)

    # -- naming ------------------------------------------------------------

    def target_name(self, volume: objects.Volume) -> str:
        return self.configuration.target_prefix + volume['name']

    def portals(self) -> list[str]:
        """``ip:port`` of every portal, the primary address first."""
        conf = self.configuration
        addresses = [conf.target_ip_address] + list(
            conf.safe_get('target_secondary_ip_addresses') or [])
        return ['%s:%s' % (volume_utils.sanitize_host(address),
                           conf.target_port) for address in addresses]

    def location(self, volume: objects.Volume) -> str:
        """provider_location, in the format Cinder's iSCSI code parses."""
        return '%s %s %d' % (';'.join(self.portals()),
                             self.target_name(volume), tgtadm.BACKING_LUN)

    # -- export ------------------------------------------------------------

    def create(self, volume: objects.Volume,
               path: str) -> tuple[str, Optional[str]]:
        """Export *path*; returns ``(provider_location, provider_auth)``.

        A new export gets a new CHAP account; an existing one is returned
        as it is, with the volume's current provider_auth.
        """
        name = self.target_name(volume)
        if self.target.tid_of(name) is not None:
            return self.location(volume), volume['provider_auth']
        username = password = None
        if self.configuration.forcedetach_chap_auth:
            username = volume_utils.generate_username()
            password = volume_utils.generate_password()
        self.target.export(name, path, username, password)
        auth = 'CHAP %s %s' % (username, password) if username else None
        return self.location(volume), auth

    def remake(self, volume: objects.Volume, path: str) -> None:
        """Re-create an existing target so tgtd reads *path*'s new size.

        tgtd reads a LUN's size when the LUN is created.  Like upstream's
        ``tgt-admin --update --force``, this drops the sessions; the
        target comes back with the same CHAP account and the ACL entries
        it had, and the initiators log in again.  It holds the volume's
        lock, so a force-detach's revocation is not undone.
        """
        name = self.target_name(volume)
        with locks.held(volume['id']):
            state = self.target.find(name)
            if state is None:
                return
            if not tgtadm.is_ready(state):
                LOG.info('Export of volume %s was revoked for every host '
                         '(offline): removed, not made again.', volume['id'])
                self.target.unexport(name, state)
                return
            username, password = chap(volume)
            acls = list(state.acls)
            self.target.unexport(name, state)
            self.target.export(name, path, username, password)
            for initiator in acls:
                if connector_grammar.is_iscsi_name(initiator):
                    self.target.grant(name, initiator)

    def ensure(self, volume: objects.Volume, path: str,
               in_teardown: Optional[list[Optional[dict[str, Any]]]] = None
               ) -> None:
        """Re-create a lost export (tgtd restarted) for attached hosts.

        *in_teardown*: the connectors an interrupted force-detach was
        revoking (``None`` in it: every host); they are not granted again.
        """
        name = self.target_name(volume)
        if self.target.tid_of(name) is not None:
            return
        in_teardown = in_teardown or []
        initiators = []
        for attachment in volume.volume_attachment:
            initiator = (attachment.connector or {}).get('initiator')
            if not initiator:
                continue
            if None in in_teardown or any(
                    fd_attachments.same_host(c, attachment.connector)
                    for c in in_teardown):
                LOG.warning('Attachment %(att)s of volume %(vol)s: its host '
                            'was being force-detached when the volume '
                            'service stopped; not granted again.',
                            {'att': attachment.id, 'vol': volume.id})
                continue
            if not connector_grammar.is_iscsi_name(initiator):
                # Stored before connectors were checked: never granted.
                LOG.error('Attachment %(att)s of volume %(vol)s has a '
                          'malformed initiator %(ini)r: not granted.',
                          {'att': attachment.id, 'vol': volume.id,
                           'ini': initiator})
                continue
            initiators.append(initiator)
        if not initiators:
            return
        username, password = chap(volume)
        self.target.export(name, path, username, password)
        for initiator in initiators:
            self.target.grant(name, initiator)

    def remove(self, volume: objects.Volume) -> None:
        """Remove target, LUN, sessions and CHAP account; idempotent.

        Kept while the host of another live attachment still has access:
        Cinder's os-force_detach and os-detach call this unconditionally
        after revoking one host of a multiattach volume.  Only then is the
        target's ACL read (tgtd shows it only in the listing of every
        target): when a live attachment's host is not one the volume's
        recorded teardown revokes (see :func:`_leaving`).  Otherwise the
        target is deleted by its tid, with the volume's CHAP account
        (deleted even when the target is already gone: an interrupted
        run).
        """
        name = self.target_name(volume)
        users = [a for a in volume.volume_attachment or ()
                 if fd_attachments.is_live(a) and a.connector]
        state = None
        if users and not _leaving(volume, users):
            state = self.target.find(name)
            if state is not None and state.acls and tgtadm.is_ready(state):
                initiators = {a.connector.get('initiator') for a in users}
                kept = sorted(initiators.intersection(state.acls))
                if kept:
                    LOG.info('Export of volume %s kept: still used by %s.',
                             volume.id, ', '.join(kept))
                    return
        username, _password = chap(volume)
        self.target.unexport(name, state,
                             accounts=[username] if username else [])

    # -- connections ---------------------------------------------------------

    def connection_data(self, volume: objects.Volume) -> dict[str, Any]:
        """iSCSI connection data, with the multipath lists os-brick reads.

        The ``target_portals``/``target_iqns``/``target_luns`` lists let
        os-brick find the session to tear down without its discovery
        database (empty on a host that never ran discovery).
        """
        portals = self.portals()
        name = self.target_name(volume)
        return {'target_discovered': False,
                'target_portal': portals[0],
                'target_iqn': name,
                'target_lun': tgtadm.BACKING_LUN,
                'target_portals': portals,
                'target_iqns': [name] * len(portals),
                'target_luns': [tgtadm.BACKING_LUN] * len(portals),
                'volume_id': volume['id'],
                'discard': True}

    def connect(self, volume: objects.Volume, connector: dict[str, Any],
                path: Optional[str] = None) -> dict[str, Any]:
        """Grant the connector's initiator; its iSCSI connection_info.

        The connector must have been validated (connector_grammar), and
        the caller holds the volume's lock.  Cinder exports (its
        ``create_export``) before it connects, in two calls: the removal
        of another attachment's export in between (Cinder's attachment
        delete, its host the last one granted) leaves no target.  It is
        then exported again from *path* with the volume's CHAP account,
        which ``create_export`` has just stored (without *path*: refused).
        """
        name = self.target_name(volume)
        state = self.target.find(name)
        if state is not None and not tgtadm.is_ready(state):
            # Every host was revoked (offline: an ACL entry may be left
            # that nobody could name) and the export not removed yet.
            LOG.info('Export of volume %s was revoked for every host: '
                     'made again before the grant.', volume['id'])
            self.target.unexport(name, state)
            state = None
        if state is None:
            if path is None:
                raise exception.VolumeBackendAPIException(
                    data=_('volume %s is not exported') % volume['id'])
            LOG.info('Volume %s lost its export before it was connected '
                     '(another attachment left): exporting it again.',
                     volume['id'])
            username, password = chap(volume)
            state = self.target.export(name, path, username, password)
        self.target.grant(name, connector['initiator'], state=state)
        data = self.connection_data(volume)
        username, password = chap(volume)
        if username:
            data.update(auth_method='CHAP', auth_username=username,
                        auth_password=password)
        return {'driver_volume_type': 'iscsi', 'data': data}

    def revoke(self, volume: objects.Volume,
               connector: Optional[dict[str, Any]]) -> bool:
        """Unbind the host's ACL and drop its sessions (None: every host).

        Returns True when other hosts keep access.  An export made by
        upstream's helper admits any initiator name (``initiator-address
        ALL``): it is narrowed to the exact initiators of the attachments
        Cinder keeps before the host's sessions are dropped, so the host
        cannot log back in.
        """
        name = self.target_name(volume)
        if connector is None:
            known = [(a.connector or {}).get('initiator')
                     for a in volume.volume_attachment or ()]
            return bool(self.target.revoke(name, known=[
                i for i in known if connector_grammar.is_iscsi_name(i)]))
        keep = self.kept_initiators(volume, connector)
        return bool(self.target.revoke(name, [connector['initiator']],
                                       keep=keep))

    def holders(self) -> dict[str, list[host_access.Holder]]:
        """{volume name: [Holder]} of every target of ours, in one read.

        ACL entries and sessions per initiator, address rules (``ALL``
        admits every host), and a target nobody may reach as an
        ``export`` holder: the audit's evidence
        (:mod:`cinder_forcedetach.audit`).
        """
        prefix = self.configuration.target_prefix
        return {name[len(prefix):]: _state_holders(state)
                for name, state in self.target.list_targets().items()
                if name.startswith(prefix)}

    def volume_holders(self, volume: objects.Volume
                       ) -> list[host_access.Holder]:
        """The holders of *volume*'s target alone (see :meth:`holders`)."""
        state = self.target.find(self.target_name(volume))
        return [] if state is None else _state_holders(state)

    @staticmethod
    def kept_initiators(volume: objects.Volume,
                        connector: Optional[dict[str, Any]]) -> list[str]:
        """Initiators of live attachments of hosts other than *connector*."""
        kept = []
        for attachment in fd_attachments.of_other_hosts(
                volume.volume_attachment, connector):
            initiator = attachment.connector.get('initiator')
            if (connector_grammar.is_iscsi_name(initiator) and
                    initiator not in kept):
                kept.append(initiator)
        return kept


def _leaving(volume: objects.Volume,
             users: Sequence[objects.VolumeAttachment]) -> bool:
    """Whether the volume's recorded teardown revokes every host of *users*.

    The force-detach flow records the hosts it revokes before it revokes
    them (:func:`fd_attachments.hosts_in_teardown`): Cinder's detach
    removes the export while the attachment leaving is still live.  A
    volume read without its admin metadata has no record: False.
    """
    try:
        hosts = fd_attachments.hosts_in_teardown(volume)
    except (AttributeError, KeyError, exception.CinderException,
            exception.OrphanedObjectError):
        return False
    if not hosts:
        return False
    if None in hosts:
        return True
    return all(any(fd_attachments.same_host(a.connector, host)
                   for host in hosts) for a in users)


def _state_holders(state: base.TargetState) -> list[host_access.Holder]:
    """The audit's holders of one target.

    An offline target (revoked for every host) lets nobody in, whatever
    ACL entry or session it still has: it is an ``export`` holder only.
    """
    if not tgtadm.is_ready(state):
        return [host_access.Holder('export', frozenset(), state.name, None)]
    holders = [_initiator_holder('acl', i) for i in state.acls]
    holders += [_initiator_holder('session', s.initiator)
                for s in state.sessions if s.initiator]
    # Ours never writes address rules: no connector revokes one.
    for rule in state.address_acls:
        keys = {host_access.ANY_HOST} if rule == 'ALL' else {'ip:' + rule}
        holders.append(host_access.Holder('address-acl', frozenset(keys), rule,
                                          None))
    if not holders:
        holders.append(host_access.Holder('export', frozenset(), state.name,
                                          None))
    return holders


@functools.lru_cache(maxsize=65536)
def _initiator_holder(kind: str, initiator: str) -> host_access.Holder:
    """One holder per initiator and kind, shared: hosts hold many volumes."""
    return host_access.Holder(kind, frozenset({'iqn:' + initiator}), initiator,
                              {'initiator': initiator})


class TgtTarget(target_driver.Target):
    """Cinder target driver (``target_helper = tgtadm`` of our LVM driver).

    What upstream's LVM driver calls on its ``target_driver``, done by
    :class:`VolumeExports`, plus the force-detach hooks :meth:`revoke` and
    :meth:`local_connection_info`.  Unlike upstream's ``TgtAdm`` it writes
    no persist files under ``volumes_dir`` and never runs ``tgt-admin``:
    tgtd is driven over ``tgtadm`` only, and a lost export is re-created
    by ``ensure_export``.
    """

    protocol = constants.ISCSI
    storage_protocol = constants.ISCSI
    SHARED_TARGET_SUPPORT = False
    SECONDARY_IP_SUPPORT = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super(TgtTarget, self).__init__(*args, **kwargs)
        self.exports = VolumeExports(self.configuration)

    # -- Cinder's target driver interface ------------------------------------

    def create_export(self, context: cinder_context.RequestContext,
                      volume: objects.Volume,
                      volume_path: str) -> dict[str, Optional[str]]:
        location, auth = self.exports.create(volume, volume_path)
        return {'location': location, 'auth': auth}

    def ensure_export(self, context: cinder_context.RequestContext,
                      volume: objects.Volume, volume_path: str) -> None:
        self.exports.ensure(volume, volume_path,
                            fd_attachments.hosts_in_teardown(volume))

    def remove_export(self, context: cinder_context.RequestContext,
                      volume: objects.Volume) -> None:
        self.exports.remove(volume)

    def validate_connector(self, connector: Any) -> bool:
        connector_grammar.check(connector, REQUIRED_CONNECTOR_FIELDS)
        return True

    def initialize_connection(self, volume: objects.Volume,
                              connector: dict[str, Any],
                              volume_path: Optional[str] = None
                              ) -> dict[str, Any]:
        """See :meth:`VolumeExports.connect`; our LVM driver gives the path."""
        self.validate_connector(connector)
        return self.exports.connect(volume, connector, volume_path)

    def terminate_connection(self, volume: objects.Volume,
                             connector: Optional[dict[str, Any]],
                             **kwargs: Any) -> bool:
        """Revoke the host (keeping other hosts' live attachments)."""
        if connector is not None:
            self.validate_connector(connector)
        return self.revoke(volume, connector)

    @staticmethod
    def are_same_connector(A: dict[str, Any], B: dict[str, Any]) -> bool:
        a_initiator = A.get('initiator')
        return bool(a_initiator) and a_initiator == B.get('initiator')

    def extend_target(self, volume: objects.Volume) -> None:
        """Re-create an in-use target so tgtd sees the LV's new size.

        See :meth:`VolumeExports.remake`.
        """
        self.exports.remake(volume, '/dev/%s/%s' % (
            self.configuration.volume_group, volume['name']))

    # -- force-detach hooks ------------------------------------------------

    def revoke(self, volume: objects.Volume,
               connector: Optional[dict[str, Any]]) -> bool:
        """See :meth:`VolumeExports.revoke`."""
        return self.exports.revoke(volume, connector)

    def local_connection_info(self, volume: objects.Volume
                              ) -> dict[str, Any]:
        return {'driver_volume_type': 'iscsi',
                'data': self.exports.connection_data(volume)}
