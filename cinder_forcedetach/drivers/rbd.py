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

"""Cinder's RBD driver plus safe force-detach: a drop-in.

``volume_driver = cinder_forcedetach.drivers.rbd.RBDDriver``

:class:`RBDDriver` is upstream's ``cinder.volume.drivers.rbd.RBDDriver``
(every option and feature: QoS, replication and failover, encrypted
volumes, manage/unmanage, revert to snapshot, trash and deferred deletion,
clone depth) with :class:`~cinder_forcedetach.mixin.ForceDetachMixin`:

* detach, attachment delete and ``os-force_detach`` run the force-detach
  flow, which fences the librbd clients of the detached hosts
  (:mod:`cinder_forcedetach.ceph.fencing`) -- upstream's
  ``terminate_connection`` does nothing, so a force-detached hypervisor
  goes on writing;
* fence records operators list and lift (``cinder-forcedetach fence``);
* connection_info refresh (monitors' current addresses);
* reimage and copy to volume behind Cinder's image gates: a copy-on-write
  clone of a same-cluster raw image, ``qemu-img`` straight from a
  same-cluster image, or a stream of the image service's download
  (:mod:`cinder_forcedetach.ceph.rbd_io`); create-from-image clones only
  images whose head the format inspector passes as raw.

The Ceph client work lives in :mod:`cinder_forcedetach.ceph`.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, TYPE_CHECKING

from cinder import exception
from cinder import interface
from cinder.volume import configuration
from cinder.volume.drivers import rbd as upstream_rbd
from oslo_config import cfg
from oslo_log import log as logging

from cinder_forcedetach import attachments as fd_attachments
from cinder_forcedetach.ceph import cluster
from cinder_forcedetach.ceph import fencing
from cinder_forcedetach.ceph import rbd_io
from cinder_forcedetach.flows import force_detach as force_detach_flow
from cinder_forcedetach import host_access
from cinder_forcedetach import image_gates
from cinder_forcedetach import mixin
from cinder_forcedetach import notifications

if TYPE_CHECKING:
    from cinder import context as cinder_context
    from cinder import objects

LOG = logging.getLogger(__name__)
CONF = cfg.CONF

#: Admin metadata key set while a reimage by clone is under way.
REIMAGE_MARK = 'forcedetach_reimage'

rbd_opts = [
    cfg.StrOpt('forcedetach_rbd_keyring',
               help='Keyring file of rbd_user for this driver\'s own '
                    'connections (fencing, reimage) and for qemu-img '
                    '(passed as a path, never as a key). Default: what the '
                    'Ceph configuration file names. It is never put into '
                    'connection_info.'),
    cfg.IntOpt('forcedetach_rbd_timeout',
               default=20, min=1,
               help='Seconds librados may wait for the monitors and OSDs '
                    'in each call of the fencing and reimage code '
                    '(client_mount_timeout, rados_mon_op_timeout, '
                    'rados_osd_op_timeout), so that a force-detach with the '
                    'cluster unreachable fails in bounded time instead of '
                    'hanging (librados waits 300 s by default).'),
    cfg.IntOpt('forcedetach_rbd_blocklist_expire_seconds',
               default=86400, min=1,
               help='Lifetime of the OSD blocklist entry that fences a '
                    'force-detached client. The fenced client instance '
                    'cannot write again once it has seen the blocklist; '
                    'the lifetime only has to cover a client that is cut '
                    'off from the cluster and could see it late.'),
    cfg.FloatOpt('forcedetach_rbd_fence_verify_timeout',
                 default=10.0, min=0.0,
                 help='Seconds to wait for fenced clients to lose their '
                      'watches and locks before the fence is declared '
                      'failed (the Cinder database is then not reset).'),
    cfg.BoolOpt('forcedetach_rbd_reimage_flatten',
                default=False,
                help='After a reimage by copy-on-write clone of a Glance '
                     'image in the same cluster, flatten the volume so it '
                     'no longer depends on the image snapshot.'),
]

CONF.register_opts(rbd_opts, group=configuration.SHARED_CONF_GROUP)


@interface.volumedriver
class RBDDriver(mixin.ForceDetachMixin, upstream_rbd.RBDDriver):
    """Upstream's RBD driver whose force-detach fences stale clients."""

    CI_WIKI_NAME = 'cinder-forcedetach_CI'

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super(RBDDriver, self).__init__(*args, **kwargs)
        self.configuration.append_config_values(rbd_opts)

    @classmethod
    def get_driver_options(cls) -> list[cfg.Opt]:
        return (upstream_rbd.RBDDriver.get_driver_options() +
                mixin.ForceDetachMixin.get_driver_options() + rbd_opts)

    # -- the Ceph layer, on the cluster the driver serves now --------------

    def _access(self) -> cluster.Access:
        """How to reach the active cluster (replication failover aware).

        Needs no ``do_setup``: the fence commands reach the cluster only
        through this layer, in bounded time, even when upstream's setup
        would wait for librados' default timeouts.
        """
        active = (self._active_config or
                  self._get_target_config(self._active_backend_id))
        name, conf, user, _secret_uuid = self._get_config_tuple(active)
        config = self.configuration
        return cluster.Access(name=name, conf=conf, user=user,
                              keyring=config.forcedetach_rbd_keyring,
                              timeout=config.forcedetach_rbd_timeout)

    def _fencing(self) -> fencing.Fencing:
        config = self.configuration
        return fencing.Fencing(
            self._access(), config.rbd_pool,
            config.forcedetach_rbd_blocklist_expire_seconds,
            config.forcedetach_rbd_fence_verify_timeout)

    def _images(self) -> rbd_io.Images:
        return rbd_io.Images(self._access(), self.configuration.rbd_pool,
                             self._execute)

    # -- connections -------------------------------------------------------

    def validate_connector(self, connector: dict[str, Any]) -> None:
        super(RBDDriver, self).validate_connector(connector)
        if not (connector.get('ip') or connector.get('host')):
            raise exception.InvalidConnectorException(
                missing='ip or host (the address its RBD clients use)')

    def local_connection_info(self, volume: objects.Volume,
                              connector: dict[str, Any]) -> dict[str, Any]:
        # Called by the flow, which holds the volume's lock already.
        return self.initialize_connection_unlocked(volume, connector)

    # -- force-detach hooks ------------------------------------------------

    def revoke_host_access(self, volume: objects.Volume,
                           connector: Optional[dict[str, Any]]) -> bool:
        """Nothing to revoke on a target: say whether other hosts stay."""
        if connector is None:
            return False
        return bool(fd_attachments.of_other_hosts(volume.volume_attachment,
                                                  connector))

    def fence_clients(self, volume: objects.Volume,
                      connectors: list[Optional[dict[str, Any]]],
                      keep_attachments: list[Any]) -> list[str]:
        """Blocklist the clients of *connectors* that hold the image.

        See :meth:`cinder_forcedetach.ceph.fencing.Fencing.fence`.
        """
        return self._fencing().fence(volume, connectors, keep_attachments)

    def fence_host(self, context: cinder_context.RequestContext,
                   host_connector: dict[str, Any],
                   volumes: Iterable[objects.Volume], ip_wide: bool = False
                   ) -> force_detach_flow.HostTeardown:
        """Force-detach one host from many volumes at once (a host fence).

        Every volume goes through the force-detach flow, as
        :meth:`force_detach` with *host_connector* would take it (its lock;
        its database reset only once its host's clients are cut; a second
        run finds nothing and succeeds), but the Ceph work of all of them
        is one batch (:meth:`~cinder_forcedetach.ceph.fencing.Fencing.
        fence_host`): one connection, each distinct client blocklisted
        once, one wait for every image (see
        :func:`cinder_forcedetach.flows.force_detach.run_host`).

        :param ip_wide: blocklist the host's IP(s) as a whole (every
            client of that IP, on any pool, until the entries expire or
            are lifted) instead of each of its client instances.
        :returns: a :data:`~cinder_forcedetach.flows.force_detach.
            HostTeardown`: ``done`` ``{volume id: [client addresses
            fenced]}``, ``failed`` ``{volume id: exception}`` (those
            volumes are unchanged in Cinder's database).
        """
        self.validate_connector(host_connector)
        fences = self._fencing()

        def fence_many(requests: list[force_detach_flow.FenceRequest]
                       ) -> dict[str, list[str] | BaseException]:
            # The flow revokes host_connector on every volume; anything
            # else is left to fence_clients, volume by volume.
            ours = [(volume, remaining) for volume, revoke, remaining
                    in requests if list(revoke) == [host_connector]]
            result = fences.fence_host(
                [volume for volume, _kept in ours], host_connector,
                {volume.id: kept for volume, kept in ours}, ip_wide=ip_wide)
            return {**result.fenced, **result.failed}

        return force_detach_flow.run_host(context, self, volumes,
                                          host_connector, fence_many,
                                          reason=notifications.HOST)

    def count_fence_records(self) -> int:
        """Fence records not expired yet, for the pool capabilities.

        One connection and one omap read of the pool's fence records
        (see :meth:`~cinder_forcedetach.ceph.fencing.Fencing.count_active`).
        """
        return self._fencing().count_active()

    def list_fences(self, volume: Optional[objects.Volume] = None
                    ) -> list[dict[str, Any]]:
        """Recorded fences (of *volume*, or all), with ``active`` flags."""
        return self._fencing().list(volume.id if volume is not None
                                    else None)

    def lift_fence(self, volume_or_addr: objects.Volume | str) -> list[str]:
        """Lift the fences of a volume (object or id) or of one address."""
        value = getattr(volume_or_addr, 'id', volume_or_addr)
        if value is not volume_or_addr or not (
                '/' in str(value) or ':' in str(value)):
            return self._fencing().lift(volume_id=value)
        return self._fencing().lift(addr=value)

    #: Access is a live client, not a grant: a stopped guest holds nothing.
    audit_grants = False
    #: The local commands (audit, host fence) work through the Ceph layer,
    #: in bounded time: upstream's do_setup would wait for librados'
    #: default timeouts (see cinder_forcedetach.cmd.local.command_driver).
    commands_need_setup = False

    def audit_holders(self) -> dict[str, list[host_access.Holder]]:
        """Live clients of every image of the pool, keyed by their IP.

        Neither this driver's own client nor fenced ones.
        """
        return {name: [_client_holder(kind, addr) for kind, addr in clients]
                for name, clients in self._fencing().holders().items()}

    def volume_holders(self, volume: objects.Volume
                       ) -> list[host_access.Holder]:
        """The live clients of the volume's image (one connection)."""
        return [_client_holder(kind, addr) for kind, addr in
                self._fencing().image_holders(volume.name)]

    # -- images ------------------------------------------------------------

    def image_destination(self, volume: objects.Volume) -> str:
        return self._images().qemu_spec(volume.name)

    def open_volume_for_write(self, volume: objects.Volume
                              ) -> rbd_io.ImageFile:
        return self._images().open_file(volume.name)

    def _get_rbd_handle(self, volume: objects.Volume) -> rbd_io.ImageFile:
        """Upstream's upload source, opened with this driver's keyring.

        Upstream opens it through os-brick, which wants the keyring in
        ``/etc/ceph/<cluster>.client.<user>.keyring``; this one follows
        ``forcedetach_rbd_keyring`` and the Ceph configuration file.
        """
        return self._images().open_file(volume.name, read_only=True)

    def discard_volume(self, volume: objects.Volume) -> bool:
        self._images().discard_all(volume.name)
        return True

    def _is_cloneable(self, image_location: str,
                      image_meta: dict[str, Any]) -> bool:
        """Upstream's test, and the image's head must pass as raw."""
        if not super(RBDDriver, self)._is_cloneable(image_location,
                                                    image_meta):
            return False
        _fsid, pool, name, snap = self._parse_location(image_location)
        try:
            head = self._images().read_head((pool, name, snap))
            image_gates.check_head(name, 'raw', head)
        except (exception.Invalid, exception.ImageUnacceptable,
                exception.VolumeBackendAPIException) as err:
            LOG.warning('Image %(loc)s is not cloned: %(err)s',
                        {'loc': image_location, 'err': err})
            return False
        return True

    # Upstream's signature: no *discard* (this driver's discard_volume is
    # the mixin's default); returns the path taken, which Cinder ignores.
    def copy_image_to_volume(  # type: ignore[override]
            self, context: cinder_context.RequestContext,
            volume: objects.Volume, image_service: Any, image_id: str,
            disable_sparse: bool = False) -> Optional[str]:
        """Write an image onto the volume behind Cinder's image gates.

        * a raw image in this cluster (``rbd://fsid/pool/image/snap``)
          whose head the format inspector passes: the volume becomes a
          copy-on-write clone of that snapshot (unless the volume has
          snapshots or clients, which an in-place write must keep);
        * any other image in this cluster that passes upstream's checks
          (:func:`cinder_forcedetach.image_gates.check_source`): ``qemu-img
          convert`` reads it from its pool into the volume's RBD image;
        * otherwise the mixin's generic path: the image service's
          download, a raw stream or upstream's ``fetch_to_raw``.

        A reimage (``disable_sparse``) discards the volume once every check
        has passed, so the image's holes read as zeros without writing them.
        """
        meta = image_service.show(context, image_id)
        fmt = meta.get('disk_format') or 'raw'
        image_gates.check_allowed(image_id, fmt, self.configuration.safe_get(
            'forcedetach_image_formats'))
        ceph_images = self._images()
        location = None
        if meta.get('container_format') != 'compressed':
            location = ceph_images.same_cluster_location(
                context, image_service, image_id)
        if location and fmt == 'raw':
            # Recorded first: a delete after a crash half-way removes what
            # the clone and the swap left beside the volume.
            self.db.volume_admin_metadata_update(
                context.elevated(), volume.id, {REIMAGE_MARK: 'clone'}, False)
            cloned = ceph_images.reimage_by_clone(
                volume, location, image_id,
                features=self._clone_features(volume),
                flatten=self.configuration.forcedetach_rbd_reimage_flatten)
            self.db.volume_admin_metadata_delete(context.elevated(),
                                                 volume.id, REIMAGE_MARK)
            if cloned:
                return 'clone'
        if location and ceph_images.convert_from_cluster(
                volume, location, image_id, fmt, sparse=not disable_sparse):
            return 'qemu-img'
        return super(RBDDriver, self).copy_image_to_volume(
            context, volume, image_service, image_id,
            disable_sparse=disable_sparse)

    def _clone_features(self, volume: objects.Volume) -> Optional[int]:
        """Features of a clone that becomes *volume* (None: the parent's)."""
        if volume.multiattach:
            return self.RBD_FEATURE_LAYERING
        return None

    def delete_volume(self, volume: objects.Volume) -> None:
        """Upstream's delete, and what an interrupted reimage left."""
        super(RBDDriver, self).delete_volume(volume)
        if (volume.admin_metadata or {}).get(REIMAGE_MARK):
            self._images().remove_reimage_leftovers(volume.name)


def _client_holder(kind: str, addr: str) -> host_access.Holder:
    """The audit's holder of a librbd client, keyed by its IP."""
    ip = fencing.addr_ip(addr)
    return host_access.Holder(kind, frozenset({'ip:' + ip}), addr, {'ip': ip})
