"""iSCSI driver on tgtd whose force-detach really removes the export.

``volume_driver = cinder_forcedetach.drivers.iscsi.TgtISCSIDriver``

Volumes are sparse raw files (:mod:`cinder_forcedetach.storage.files`),
exported one target per volume by :mod:`cinder_forcedetach.targets.tgt`,
each export with its own CHAP account, created anew whenever the export is
created, and one ACL entry per initiator.  Revoking a host unbinds its ACL
and closes its sessions; removing the export removes target, LUN and CHAP
account, so a fenced initiator that reconnects is refused even after the
volume is exported again to another host.
"""

from cinder.common import constants
from cinder import exception
from cinder.i18n import _
from cinder import interface
from cinder.volume import configuration
from cinder.volume import volume_utils
from oslo_config import cfg
from oslo_log import log as logging

from cinder_forcedetach import attachments as fd_attachments
from cinder_forcedetach import connector_grammar
from cinder_forcedetach.drivers import common
from cinder_forcedetach import mixin
from cinder_forcedetach.targets import tgt

LOG = logging.getLogger(__name__)

iscsi_opts = [
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

cfg.CONF.register_opts(iscsi_opts, group=configuration.SHARED_CONF_GROUP)


@interface.volumedriver
class TgtISCSIDriver(mixin.ForceDetachMixin, common.FileVolumeDriver):
    """Sparse-file volumes exported by tgtd, with safe force-detach."""

    DEFAULT_BACKEND_NAME = 'tgt_forcedetach'
    protocol = constants.ISCSI
    required_connector_fields = ('initiator',)

    def __init__(self, *args, **kwargs):
        super(TgtISCSIDriver, self).__init__(*args, **kwargs)
        self.configuration.append_config_values(iscsi_opts)
        self.target = tgt.TgtAdm(
            control_port=self.configuration.forcedetach_tgt_control_port)

    @staticmethod
    def get_driver_options():
        return (mixin.ForceDetachMixin.get_driver_options() +
                common.volume_file_opts + iscsi_opts)

    # -- setup ---------------------------------------------------------------

    def check_for_setup_error(self):
        """Fail when tgtd is not reachable on its control port."""
        self.target.list_targets()

    # -- naming ------------------------------------------------------------

    def target_name(self, volume):
        return self.configuration.target_prefix + volume.name

    def portal(self):
        return '%s:%s' % (self.configuration.target_ip_address,
                          self.configuration.target_port)

    # -- export ------------------------------------------------------------

    def create_export(self, context, volume, connector):
        """Export the volume; a new export gets a new CHAP account."""
        name = self.target_name(volume)
        location = '%s %s %d' % (self.portal(), name, tgt.BACKING_LUN)
        if self.target.find(name) is not None:
            return {'provider_location': location}
        username = password = None
        if self.configuration.forcedetach_chap_auth:
            username = volume_utils.generate_username()
            password = volume_utils.generate_password()
        self.target.export(name, self.local_path(volume), username, password)
        auth = 'CHAP %s %s' % (username, password) if username else None
        return {'provider_location': location, 'provider_auth': auth}

    def ensure_export(self, context, volume):
        """Re-create a lost export (tgtd restarted) for attached hosts."""
        name = self.target_name(volume)
        if self.target.find(name) is not None:
            return
        initiators = []
        for attachment in volume.volume_attachment:
            initiator = (attachment.connector or {}).get('initiator')
            if not initiator:
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
        username, password = self._chap(volume)
        self.target.export(name, self.local_path(volume), username, password)
        for initiator in initiators:
            self.target.grant(name, initiator)

    def remove_export(self, context, volume):
        """Remove target, LUN, sessions and CHAP account; idempotent.

        Kept while the host of another live attachment still has access:
        Cinder's os-force_detach and os-detach call this unconditionally
        after revoking one host of a multiattach volume.
        """
        name = self.target_name(volume)
        state = self.target.find(name)
        if state is not None and state.acls:
            users = {a.connector.get('initiator')
                     for a in volume.volume_attachment
                     if fd_attachments.is_live(a) and a.connector}
            kept = sorted(users.intersection(state.acls))
            if kept:
                LOG.info('Export of volume %s kept: still used by %s.',
                         volume.id, ', '.join(kept))
                return
        self.target.unexport(name, state)
        username, _password = self._chap(volume)
        if username and (state is None or username not in state.accounts):
            # Not bound to the target (an interrupted run): apart.
            self.target.delete_account(username)

    @staticmethod
    def _chap(volume):
        parts = (volume.provider_auth or '').split()
        if len(parts) == 3 and parts[0] == 'CHAP':
            return parts[1], parts[2]
        return None, None

    def connection_data(self, volume):
        """iSCSI connection data, with the multipath lists os-brick reads.

        The ``target_portals``/``target_iqns``/``target_luns`` lists let
        os-brick find the session to tear down without its discovery
        database (empty on a host that never ran discovery).
        """
        portal = self.portal()
        name = self.target_name(volume)
        return {'target_discovered': False,
                'target_portal': portal,
                'target_iqn': name,
                'target_lun': tgt.BACKING_LUN,
                'target_portals': [portal],
                'target_iqns': [name],
                'target_luns': [tgt.BACKING_LUN],
                'volume_id': volume.id,
                'discard': True}

    def initialize_connection(self, volume, connector):
        self.validate_connector(connector)
        name = self.target_name(volume)
        if self.target.find(name) is None:
            raise exception.VolumeBackendAPIException(
                data=_('volume %s is not exported') % volume.id)
        self.target.grant(name, connector['initiator'])
        data = self.connection_data(volume)
        username, password = self._chap(volume)
        if username:
            data.update(auth_method='CHAP', auth_username=username,
                        auth_password=password)
        return {'driver_volume_type': 'iscsi', 'data': data}

    # -- force-detach hooks ------------------------------------------------

    def revoke_host_access(self, volume, connector):
        """Unbind the host's ACL and drop its sessions (None: every host).

        An export made by upstream's helper admits any initiator name
        (``initiator-address ALL``): it is narrowed to the exact
        initiators of the attachments Cinder keeps before the host's
        sessions are dropped, so the host cannot log back in.
        """
        name = self.target_name(volume)
        if connector is None:
            return bool(self.target.revoke(name))
        keep = self._kept_initiators(volume, connector)
        return bool(self.target.revoke(name, [connector['initiator']],
                                       keep=keep))

    @staticmethod
    def _kept_initiators(volume, connector):
        """Initiators of live attachments of hosts other than *connector*."""
        kept = []
        for attachment in fd_attachments.of_other_hosts(
                volume.volume_attachment, connector):
            initiator = attachment.connector.get('initiator')
            if (connector_grammar.is_iscsi_name(initiator) and
                    initiator not in kept):
                kept.append(initiator)
        return kept

    def local_connection_info(self, volume, connector):
        return {'driver_volume_type': 'iscsi',
                'data': self.connection_data(volume)}
