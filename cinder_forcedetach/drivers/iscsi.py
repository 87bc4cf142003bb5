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
from cinder.volume import driver
from cinder.volume import volume_utils
from oslo_log import log as logging

from cinder_forcedetach.flows import force_detach as force_detach_flow
from cinder_forcedetach import mixin
from cinder_forcedetach import opts
from cinder_forcedetach.storage import files
from cinder_forcedetach.targets import tgt

LOG = logging.getLogger(__name__)


@interface.volumedriver
class TgtISCSIDriver(mixin.ForceDetachMixin, driver.VolumeDriver):
    """Sparse-file volumes exported by tgtd, with safe force-detach."""

    VERSION = '1.0.0'
    CI_WIKI_NAME = 'cinder-forcedetach_CI'

    def __init__(self, *args, **kwargs):
        super(TgtISCSIDriver, self).__init__(*args, **kwargs)
        self.configuration.append_config_values(opts.iscsi_opts)
        conf = self.configuration
        self.backend_name = (conf.safe_get('volume_backend_name') or
                             'tgt_forcedetach')
        self.store = files.FileStore(conf.forcedetach_volumes_dir,
                                     execute=self._execute)
        self.target = tgt.TgtAdm(
            control_port=conf.forcedetach_tgt_control_port)
        self.protocol = constants.ISCSI

    @staticmethod
    def get_driver_options():
        return (opts.force_detach_opts + opts.image_opts + opts.iscsi_opts)

    # -- setup ---------------------------------------------------------------

    def do_setup(self, context):
        self.store.setup()

    def check_for_setup_error(self):
        """Fail when tgtd is not reachable on its control port."""
        self.target.list_targets()

    # -- naming ------------------------------------------------------------

    def target_name(self, volume):
        return self.configuration.target_prefix + volume.name

    def portal(self):
        return '%s:%s' % (self.configuration.target_ip_address,
                          self.configuration.target_port)

    def local_path(self, volume):
        return self.store.path(volume.name)

    # -- volumes and snapshots ---------------------------------------------

    def create_volume(self, volume):
        self.store.create(volume.name, volume.size)

    def delete_volume(self, volume):
        self.store.delete(volume.name)

    def extend_volume(self, volume, new_size):
        self.store.resize(volume.name, new_size)

    def create_snapshot(self, snapshot):
        self.store.copy(snapshot.volume_name, snapshot.name)

    def delete_snapshot(self, snapshot):
        self.store.delete(snapshot.name)

    def create_volume_from_snapshot(self, volume, snapshot):
        self.store.copy(snapshot.name, volume.name, size_gb=volume.size)

    def create_cloned_volume(self, volume, src_vref):
        self.store.copy(src_vref.name, volume.name, size_gb=volume.size)

    def copy_volume_to_image(self, context, volume, image_service,
                             image_meta):
        volume_utils.upload_volume(context, image_service, image_meta,
                                   self.local_path(volume), volume)

    def clone_image(self, context, volume, image_location, image_meta,
                    image_service):
        return None, False

    def _update_volume_stats(self):
        total, free, allocated = self.store.capacity()
        self._stats = {
            'volume_backend_name': self.backend_name,
            'vendor_name': 'Open Source',
            'driver_version': self.VERSION,
            'storage_protocol': self.protocol,
            'total_capacity_gb': total,
            'free_capacity_gb': free,
            'provisioned_capacity_gb': allocated,
            'reserved_percentage':
                self.configuration.safe_get('reserved_percentage') or 0,
            'max_over_subscription_ratio':
                self.configuration.safe_get('max_over_subscription_ratio'),
            'thin_provisioning_support': True,
            'thick_provisioning_support': False,
            'multiattach': True,
            'QoS_support': False,
        }

    # -- export ------------------------------------------------------------

    def validate_connector(self, connector):
        initiator = connector.get('initiator')
        if not isinstance(initiator, str) or not initiator.strip():
            raise exception.InvalidConnectorException(
                missing='initiator (an iSCSI initiator name)')

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
        initiators = [a.connector['initiator']
                      for a in volume.volume_attachment
                      if a.connector and a.connector.get('initiator')]
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
                     if force_detach_flow.is_live(a) and a.connector}
            kept = sorted(users.intersection(state.acls))
            if kept:
                LOG.info('Export of volume %s kept: still used by %s.',
                         volume.id, ', '.join(kept))
                return
        self.target.unexport(name)
        username, _password = self._chap(volume)
        if username:
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
        initiators = None if connector is None else [connector['initiator']]
        remaining = self.target.revoke(self.target_name(volume), initiators)
        return bool(remaining)

    def local_connection_info(self, volume, connector):
        return {'driver_volume_type': 'iscsi',
                'data': self.connection_data(volume)}
