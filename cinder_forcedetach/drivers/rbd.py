"""Ceph RBD driver whose force-detach fences clients still holding a volume.

``volume_driver = cinder_forcedetach.drivers.rbd.RBDDriver``

Upstream's RBD driver has nothing to revoke on detach: its
``terminate_connection`` and ``remove_export`` are no-ops, so a hypervisor
that Cinder force-detached keeps its librbd client, its watch and the
image's exclusive lock, and goes on writing.  This driver fences such
clients the way Ceph intends it (``rbd lock break`` / ``osd blocklist``):

1. find who holds the image: its watchers, the exclusive lock's owner and
   any advisory lockers, by client address (``IP:PORT/NONCE``);
2. select the clients to fence: never this driver's own connection;
   with no attachment staying, every other client; otherwise (multiattach)
   the clients at an IP of the hosts being detached, sparing those at an
   IP of an attachment that stays (a connector's ``ip``, ``host`` and the
   addresses its host name resolves to).  A client at an IP of both, or
   of neither, fails the force-detach before anything is done: nothing
   in Cinder says whose it is;
3. record the fence (an omap entry of the ``cinder-forcedetach.fences``
   object in the volume pool) so operators can list and lift it;
4. ``osd blocklist add ADDR EXPIRE`` each one (exactly that client
   instance, nonce included), then break the locks it owned;
5. check, for a bounded time, that none of them still holds the image,
   and raise :class:`FenceFailed` otherwise, so Cinder's database is not
   reset over a client that can still write.

A fenced client's next I/O fails with ``ConnectionShutdown`` (errno 108);
a new client opens the image and writes at once.  Everything is
idempotent: a run with nothing left to fence is a success, and a run after
a crash between the blocklist and the lock break finishes the job (the
dead owner of the lock is still selected).

The rest is a compact RBD driver on the librados/librbd bindings: volumes,
snapshots, clone v2 clones, copy to and from images, reimage by a
copy-on-write clone of a same-cluster image's snapshot or by ``qemu-img``
straight into the RBD image (the keyring stays in files, never on a
command line), and ``initialize_connection`` with the monitors' current
addresses read from the monmap on every call.
"""

import contextlib
import datetime
import ipaddress
import json
import math
import os
import socket
import tempfile
import time
import urllib.parse

from cinder.common import constants
from cinder import exception
from cinder.i18n import _
from cinder import interface
from cinder.volume import configuration
from cinder.volume import driver
from cinder.volume.drivers import rbd as cinder_rbd
from cinder.volume import volume_utils
from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import timeutils
from oslo_utils import units

from cinder_forcedetach import attachments as fd_attachments
from cinder_forcedetach import image as fd_image
from cinder_forcedetach import mixin
from cinder_forcedetach import opts

try:
    import rados
    import rbd
except ImportError:  # pragma: no cover - depends on the host
    rados = None
    rbd = None

LOG = logging.getLogger(__name__)
CONF = cfg.CONF

# Cinder's own RBD options, reused where they mean the same (same Opt
# objects, so loading both drivers never conflicts).
_REUSED = ('rbd_cluster_name', 'rbd_pool', 'rbd_user', 'rbd_ceph_conf',
           'rbd_secret_uuid', 'rbd_flatten_volume_from_snapshot',
           'rbd_store_chunk_size')
upstream_rbd_opts = [o for o in cinder_rbd.RBD_OPTS if o.dest in _REUSED]

rbd_opts = [
    cfg.StrOpt('forcedetach_rbd_keyring',
               help='Keyring file of rbd_user for this driver\'s own '
                    'connections and for qemu-img (passed as a path, never '
                    'as a key). Default: what the Ceph configuration file '
                    'names. It is never put into connection_info.'),
    cfg.IntOpt('forcedetach_rbd_timeout',
               default=20, min=1,
               help='Seconds librados may wait for the monitors and OSDs '
                    'in each call of this driver (client_mount_timeout, '
                    'rados_mon_op_timeout, rados_osd_op_timeout), so that a '
                    'force-detach with the cluster unreachable fails in '
                    'bounded time instead of hanging (librados waits 300 s '
                    'by default).'),
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

FENCES_OBJECT = 'cinder-forcedetach.fences'
REIMAGE_TMP_SUFFIX = '.reimage-new'
REIMAGE_OLD_SUFFIX = '.reimage-old'
CLONE_SNAP_SUFFIX = '.clone-snap'
RBD_URL_PREFIX = 'rbd://'


class CephUnavailable(exception.VolumeBackendAPIException):
    message = _('Ceph cluster unavailable: %(reason)s')


class FenceFailed(exception.VolumeBackendAPIException):
    message = _('Could not fence the clients of volume %(volume_id)s: '
                '%(reason)s')


# -- pure helpers (unit tested without Ceph) ---------------------------------


def normalize_addr(addr):
    """A client address as the blocklist takes it: ``IP:PORT/NONCE``."""
    addr = (addr or '').strip()
    if addr.startswith('[') and addr.endswith(']') and ',' not in addr:
        addr = addr[1:-1]           # a one-entry addrvec
    for prefix in ('v1:', 'v2:', 'any:'):
        if addr.startswith(prefix):
            addr = addr[len(prefix):]
    return addr


def addr_ip(addr):
    """The IP of a client address (``1.2.3.4:0/99``, ``[::1]:0/5``)."""
    host = normalize_addr(addr).split('/', 1)[0]
    if host.startswith('['):
        host = host[1:host.find(']')]
    elif host.count(':') == 1:
        host = host.rsplit(':', 1)[0]
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def _ip_literal(value):
    try:
        return str(ipaddress.ip_address(str(value).strip('[]')))
    except ValueError:
        return None


def connector_ips(connector, resolve=None):
    """The IPs of a host's connector: its clients may use any of them.

    Its ``ip``, its ``host`` if an IP literal, and otherwise every address
    the ``host`` name resolves to with *resolve* (default: the system
    resolver, /etc/hosts first): a multi-homed host's clients may reach
    Ceph from an address other than the connector's ``ip``.
    """
    if not connector:
        return set()
    ips = {ip for ip in (_ip_literal(connector.get(k))
                         for k in ('ip', 'host') if connector.get(k))
           if ip}
    host = connector.get('host')
    if host and not _ip_literal(host):
        ips.update((resolve or _resolve)(host))
    return ips


def _resolve(name):
    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return []
    return [str(ipaddress.ip_address(i[4][0])) for i in infos]


AMBIGUOUS = ('its IP is both a detached host\'s and one of an attachment '
             'that stays')
UNEXPLAINED = ('its IP is neither a detached host\'s nor one of an '
               'attachment that stays')


class UnexplainedClients(Exception):
    """Holders no attachment explains: ``clients`` is ``[(addr, why)]``."""

    def __init__(self, clients):
        super(UnexplainedClients, self).__init__(
            '; '.join('%s: %s' % c for c in clients))
        self.clients = clients


def select_fence_targets(holders, own_addrs, connectors, keep_connectors,
                         resolve=None):
    """Which client addresses to fence.

    :param holders: client addresses holding the image (watchers, lock
        owners, lockers; duplicates allowed).
    :param own_addrs: this driver's own client address(es): never fenced.
    :param connectors: the hosts being detached; ``None`` in the list means
        every host.
    :param keep_connectors: one entry per attachment that stays: its
        connector, or None.  With none, every holder but ours is fenced,
        whatever its IP.  Otherwise a holder at an IP of a kept connector
        is spared, one at an IP of a detached host is fenced (a host that
        keeps another attachment is not detached), and any other is
        unexplained.
    :returns: ``(targets, spared)``: sorted addresses to fence, and
        ``[(addr, reason)]`` of holders left alone.
    :raises UnexplainedClients: holders at an IP of both a detached and a
        kept host, or of neither: fencing them or not could be wrong.
    """
    own = {normalize_addr(a) for a in own_addrs or ()}
    keep_connectors = list(keep_connectors or ())
    everyone = not keep_connectors or any(c is None for c in connectors)
    keep, wanted = set(), set()
    for c in keep_connectors:
        keep |= connector_ips(c, resolve)
    for c in connectors:
        if c is not None and not any(fd_attachments.same_host(k, c)
                                     for k in keep_connectors):
            wanted |= connector_ips(c, resolve)
    targets, spared, unexplained, seen = [], [], [], set()
    for raw in holders:
        addr = normalize_addr(raw)
        if not addr or addr in seen:
            continue
        seen.add(addr)
        ip = addr_ip(addr)
        if addr in own:
            spared.append((addr, 'this driver'))
        elif ip in keep and ip in wanted:
            unexplained.append((addr, AMBIGUOUS))
        elif ip in keep:
            spared.append((addr, 'an attachment that stays'))
        elif everyone or ip in wanted:
            targets.append(addr)
        else:
            unexplained.append((addr, UNEXPLAINED))
    if unexplained:
        raise UnexplainedClients(unexplained)
    return sorted(targets), spared


def _unexplained(err, holders):
    """The operator's error for :class:`UnexplainedClients`."""
    kinds = {}
    for kind, addr in holders:
        kinds.setdefault(normalize_addr(addr), set()).add(kind)
    clients = '; '.join(
        _('client %(addr)s (%(kinds)s) holds the image and %(why)s') % {
            'addr': addr, 'kinds': ', '.join(sorted(kinds.get(addr, ()))),
            'why': why} for addr, why in err.clients)
    return _('nothing was fenced: %s. To fence the clients of every host, '
             'force-detach the volume without a connector; if the address '
             'is one of a host that keeps its attachment, refresh that '
             'attachment\'s connector (nova-manage volume_attachment '
             'refresh) so that it names the address.') % clients


def parse_mon_addrs(monmap):
    """``(hosts, ports)`` of the monitors in a ``mon dump`` JSON dict.

    Like upstream, the legacy (msgr v1) address each monitor reports as
    ``addr`` is what hosts get (librados tries v2 on it first).
    """
    hosts, ports = [], []
    for mon in monmap.get('mons', []):
        addr = (mon.get('addr') or '').split('/', 1)[0]
        if not addr or addr.startswith(('0.0.0.0', '-')):
            vec = (mon.get('public_addrs') or {}).get('addrvec') or []
            by_type = {a.get('type'): a.get('addr') for a in vec}
            addr = by_type.get('v1') or by_type.get('v2') or ''
        if not addr:
            continue
        host, port = addr.rsplit(':', 1)
        hosts.append(host.strip('[]'))
        ports.append(port)
    return hosts, ports


def parse_json_prefix(text):
    """The first JSON document of *text*.

    ``osd blocklist ls`` on Pacific prints the address list followed by
    the (empty) range list: ``[...][]``.
    """
    text = (text or b'').decode() if isinstance(text, bytes) else text
    text = text.strip()
    if not text:
        return []
    value, _end = json.JSONDecoder().raw_decode(text)
    return value


def parse_rbd_location(url):
    """``(fsid, pool, image, snapshot)`` of ``rbd://fsid/pool/image/snap``.

    Returns None for anything else (other schemes, blank parts, no
    snapshot).
    """
    if not url or not url.startswith(RBD_URL_PREFIX):
        return None
    parts = [urllib.parse.unquote(p)
             for p in url[len(RBD_URL_PREFIX):].split('/')]
    if len(parts) != 4 or not all(parts):
        return None
    return tuple(parts)


def qemu_rbd_spec(pool, image, user=None, conf=None, keyring=None,
                  snapshot=None):
    """A qemu ``rbd:`` file name; credentials only as file paths."""
    def esc(value):
        return (str(value).replace('\\', '\\\\').replace(':', '\\:')
                .replace('@', '\\@'))
    spec = 'rbd:%s/%s' % (esc(pool), esc(image))
    if snapshot:
        spec += '@' + esc(snapshot)
    for key, value in (('id', user), ('conf', conf), ('keyring', keyring)):
        if value:
            spec += ':%s=%s' % (key, esc(value))
    return spec


# -- file objects on an RBD image ------------------------------------------


class _ImageFile(object):
    """A sequential binary file on an open RBD image (and its connection)."""

    def __init__(self, cluster_cm, image):
        self._cluster_cm = cluster_cm
        self._image = image
        self._pos = 0

    def write(self, data):
        if data:
            self._image.write(bytes(data), self._pos)
            self._pos += len(data)
        return len(data)

    def read(self, length=-1):
        size = self._image.size()
        if length is None or length < 0:
            length = size - self._pos
        length = max(0, min(length, size - self._pos))
        if not length:
            return b''
        data = self._image.read(self._pos, length)
        self._pos += len(data)
        return data

    def seek(self, offset, whence=os.SEEK_SET):
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos,
                os.SEEK_END: self._image.size()}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self):
        return self._pos

    def flush(self):
        self._image.flush()

    def fileno(self):
        raise IOError(_('an RBD image has no file descriptor'))

    def close(self):
        if self._image is None:
            return
        try:
            self._image.flush()
            self._image.close()
        finally:
            self._image = None
            self._cluster_cm.__exit__(None, None, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# -- the driver -------------------------------------------------------------


@interface.volumedriver
class RBDDriver(mixin.ForceDetachMixin, driver.VolumeDriver):
    """Ceph RBD volumes whose force-detach fences stale librbd clients."""

    VERSION = '1.0.0'
    CI_WIKI_NAME = 'cinder-forcedetach_CI'
    STORAGE_PROTOCOL = constants.CEPH

    def __init__(self, *args, **kwargs):
        super(RBDDriver, self).__init__(*args, **kwargs)
        self.configuration.append_config_values(upstream_rbd_opts)
        self.configuration.append_config_values(rbd_opts)
        self.backend_name = (self.configuration.safe_get(
            'volume_backend_name') or 'rbd_forcedetach')
        self.protocol = self.STORAGE_PROTOCOL
        self._fsid = None

    @staticmethod
    def get_driver_options():
        return (opts.force_detach_opts + opts.image_opts +
                upstream_rbd_opts + rbd_opts)

    # -- connections -------------------------------------------------------

    @property
    def pool(self):
        return self.configuration.rbd_pool

    def _client_conf(self):
        timeout = str(self.configuration.forcedetach_rbd_timeout)
        conf = {'client_mount_timeout': timeout,
                'rados_mon_op_timeout': timeout,
                'rados_osd_op_timeout': timeout,
                # a removed parent of clone v2 children goes to the trash
                # and is purged with its last child
                'rbd_move_parent_to_trash_on_remove': 'true'}
        if self.configuration.forcedetach_rbd_keyring:
            conf['keyring'] = self.configuration.forcedetach_rbd_keyring
        return conf

    @contextlib.contextmanager
    def _cluster(self, pool=None):
        """``(client, ioctx)`` of a fresh connection for one operation.

        A fresh connection reads the Ceph configuration again, so it
        follows monitors that moved.  librados and librbd errors raised
        inside are turned into Cinder exceptions.
        """
        if rados is None:
            raise CephUnavailable(reason=_('the rados and rbd Python '
                                           'modules are not installed'))
        conf = self.configuration
        try:
            client = rados.Rados(rados_id=conf.rbd_user,
                                 clustername=conf.rbd_cluster_name,
                                 conffile=conf.rbd_ceph_conf)
        except rados.Error as err:
            raise CephUnavailable(reason=_('cannot read the Ceph '
                                           'configuration: %s') % err)
        try:
            for key, value in self._client_conf().items():
                client.conf_set(key, value)
            client.connect()
            ioctx = client.open_ioctx(pool or self.pool)
        except rados.Error as err:
            client.shutdown()
            raise CephUnavailable(reason=_('cannot connect to the cluster '
                                           'or open pool %(pool)s: %(err)s')
                                  % {'pool': pool or self.pool, 'err': err})
        try:
            yield client, ioctx
        except (rados.Error, rbd.Error) as err:
            raise exception.VolumeBackendAPIException(
                data=_('Ceph operation failed: %s') % err)
        finally:
            ioctx.close()
            client.shutdown()

    @staticmethod
    def _mon_json(client, command):
        """Run a mon command returning JSON; raise on failure."""
        command = dict(command, format='json')
        ret, out, err = client.mon_command(json.dumps(command), b'')
        if ret:
            raise exception.VolumeBackendAPIException(
                data=_('ceph %(cmd)s failed (%(ret)d): %(err)s') % {
                    'cmd': command['prefix'], 'ret': ret, 'err': err})
        return parse_json_prefix(out)

    # -- setup and stats --------------------------------------------------

    def do_setup(self, context):
        if rados is None or rbd is None:
            raise exception.VolumeDriverException(
                message=_('the rados and rbd Python modules are required'))

    def check_for_setup_error(self):
        with self._cluster() as (client, _ioctx):
            self._fsid = client.get_fsid()

    def _get_fsid(self):
        if not self._fsid:
            with self._cluster() as (client, _ioctx):
                self._fsid = client.get_fsid()
        return self._fsid

    def _update_volume_stats(self):
        conf = self.configuration
        stats = {
            'volume_backend_name': self.backend_name,
            'vendor_name': 'Open Source',
            'driver_version': self.VERSION,
            'storage_protocol': self.protocol,
            'total_capacity_gb': 'unknown',
            'free_capacity_gb': 'unknown',
            'reserved_percentage': conf.safe_get('reserved_percentage') or 0,
            'max_over_subscription_ratio':
                conf.safe_get('max_over_subscription_ratio'),
            'thin_provisioning_support': True,
            'thick_provisioning_support': False,
            'multiattach': True,
            'QoS_support': False,
            'backend_state': 'down',
        }
        try:
            with self._cluster() as (client, _ioctx):
                self._fsid = client.get_fsid()
                df = self._mon_json(client, {'prefix': 'df'})
                quota = self._mon_json(client, {
                    'prefix': 'osd pool get-quota', 'pool': self.pool})
            pool = [p for p in df['pools'] if p['name'] == self.pool][0]
            used = pool['stats'].get('stored', pool['stats'].get(
                'bytes_used', 0))
            free = pool['stats']['max_avail']
            if quota.get('quota_max_bytes'):
                free = max(min(quota['quota_max_bytes'] - used, free), 0)
            stats['free_capacity_gb'] = round(float(free) / units.Gi, 2)
            stats['total_capacity_gb'] = round(
                float(free + used) / units.Gi, 2)
            stats['backend_state'] = 'up'
            stats['location_info'] = '%s:%s:%s:%s:%s' % (
                conf.rbd_cluster_name, conf.rbd_ceph_conf, self._fsid,
                conf.rbd_user, self.pool)
        except (exception.CinderException, KeyError, IndexError,
                ValueError) as err:
            LOG.warning('Could not read the stats of pool %(pool)s: '
                        '%(err)s', {'pool': self.pool, 'err': err})
        self._stats = stats

    # -- volumes and snapshots ---------------------------------------------

    def _features(self, volume):
        """None (cluster defaults), or layering only for multiattach.

        Exclusive lock, object map, fast-diff and journaling need a single
        writer; upstream drops them for multiattach volumes too.
        """
        if getattr(volume, 'multiattach', False):
            return rbd.RBD_FEATURE_LAYERING | rbd.RBD_FEATURE_DEEP_FLATTEN
        return None

    def _order(self):
        chunk = self.configuration.rbd_store_chunk_size * units.Mi
        return int(math.log(chunk, 2))

    def create_volume(self, volume):
        with self._cluster() as (_client, ioctx):
            rbd.RBD().create(ioctx, volume.name, volume.size * units.Gi,
                             order=self._order(), old_format=False,
                             features=self._features(volume))

    def delete_volume(self, volume):
        with self._cluster() as (_client, ioctx):
            for name in (volume.name + REIMAGE_TMP_SUFFIX,
                         volume.name + REIMAGE_OLD_SUFFIX, volume.name):
                self._remove_image(ioctx, name, volume)

    def _remove_image(self, ioctx, name, volume):
        try:
            rbd.RBD().remove(ioctx, name)
        except rbd.ImageNotFound:
            LOG.debug('RBD image %s is already gone.', name)
        except rbd.ImageBusy:
            raise exception.VolumeIsBusy(volume_name=volume.name)
        except rbd.ImageHasSnapshots:
            raise exception.VolumeIsBusy(volume_name=volume.name)

    def extend_volume(self, volume, new_size):
        with self._cluster() as (_client, ioctx):
            with rbd.Image(ioctx, volume.name) as image:
                image.resize(new_size * units.Gi)

    def create_snapshot(self, snapshot):
        with self._cluster() as (_client, ioctx):
            with rbd.Image(ioctx, snapshot.volume_name) as image:
                if not image.snap_exists(snapshot.name):
                    image.create_snap(snapshot.name)

    def delete_snapshot(self, snapshot):
        with self._cluster() as (_client, ioctx):
            try:
                image = rbd.Image(ioctx, snapshot.volume_name)
            except rbd.ImageNotFound:
                return
            with image:
                if not image.snap_exists(snapshot.name):
                    return
                try:
                    if image.is_protected_snap(snapshot.name):
                        image.unprotect_snap(snapshot.name)
                    # with clone v2 children, the snapshot moves to the
                    # trash namespace until the last child is gone
                    image.remove_snap(snapshot.name)
                except rbd.ImageBusy:
                    raise exception.SnapshotIsBusy(
                        snapshot_name=snapshot.name)

    def _clone(self, p_ioctx, p_name, p_snap, c_ioctx, c_name, features):
        """A clone v2 (no protection); v1 clusters get a protected snap."""
        try:
            rbd.RBD().clone(p_ioctx, p_name, p_snap, c_ioctx, c_name,
                            features=features, order=self._order())
        except rbd.InvalidArgument:
            with rbd.Image(p_ioctx, p_name) as parent:
                if parent.is_protected_snap(p_snap):
                    raise
                LOG.info('Cluster needs clone v1: protecting %s@%s.',
                         p_name, p_snap)
                parent.protect_snap(p_snap)
            rbd.RBD().clone(p_ioctx, p_name, p_snap, c_ioctx, c_name,
                            features=features, order=self._order())

    def _clone_features(self, volume, default):
        features = self._features(volume)
        if features is None:
            features = default
        return features | rbd.RBD_FEATURE_LAYERING

    def _resize_to(self, ioctx, name, size_gb):
        with rbd.Image(ioctx, name) as image:
            if image.size() < size_gb * units.Gi:
                image.resize(size_gb * units.Gi)

    def create_volume_from_snapshot(self, volume, snapshot):
        with self._cluster() as (_client, ioctx):
            with rbd.Image(ioctx, snapshot.volume_name,
                           read_only=True) as src:
                features = self._clone_features(volume, src.features())
            self._clone(ioctx, snapshot.volume_name, snapshot.name, ioctx,
                        volume.name, features)
            self._resize_to(ioctx, volume.name, volume.size)
            if self.configuration.rbd_flatten_volume_from_snapshot:
                with rbd.Image(ioctx, volume.name) as image:
                    image.flatten()

    def create_cloned_volume(self, volume, src_vref):
        """A point-in-time copy: clone a temporary snapshot, flatten it."""
        snap = volume.name + CLONE_SNAP_SUFFIX
        with self._cluster() as (_client, ioctx):
            with rbd.Image(ioctx, src_vref.name) as src:
                features = self._clone_features(volume, src.features())
                if not src.snap_exists(snap):
                    src.create_snap(snap)
            try:
                self._clone(ioctx, src_vref.name, snap, ioctx, volume.name,
                            features)
                with rbd.Image(ioctx, volume.name) as image:
                    image.flatten()
                self._resize_to(ioctx, volume.name, volume.size)
            finally:
                with rbd.Image(ioctx, src_vref.name) as src:
                    if src.snap_exists(snap):
                        if src.is_protected_snap(snap):
                            src.unprotect_snap(snap)
                        src.remove_snap(snap)

    # -- export and connection -------------------------------------------

    def create_export(self, context, volume, connector):
        """Nothing to export: clients reach the pool directly."""

    def ensure_export(self, context, volume):
        pass

    def remove_export(self, context, volume):
        """Nothing to remove (fencing is done by :meth:`fence_clients`)."""

    def validate_connector(self, connector):
        super(RBDDriver, self).validate_connector(connector)
        if not (connector.get('ip') or connector.get('host')):
            raise exception.InvalidConnectorException(
                missing='ip or host (the address its RBD clients use)')

    def _monitors(self):
        """``(hosts, ports, fsid)`` from the cluster's current monmap."""
        with self._cluster() as (client, _ioctx):
            monmap = self._mon_json(client, {'prefix': 'mon dump'})
        hosts, ports = parse_mon_addrs(monmap)
        self._fsid = monmap.get('fsid') or self._fsid
        return hosts, ports, self._fsid

    def initialize_connection(self, volume, connector):
        conf = self.configuration
        hosts, ports, fsid = self._monitors()
        data = {
            'name': '%s/%s' % (self.pool, volume.name),
            'hosts': hosts,
            'ports': ports,
            'cluster_name': conf.rbd_cluster_name,
            'auth_enabled': conf.rbd_user is not None,
            'auth_username': conf.rbd_user,
            'secret_type': 'ceph',
            'secret_uuid': conf.rbd_secret_uuid or fsid,
            'volume_id': volume.id,
            'discard': True,
        }
        return {'driver_volume_type': 'rbd', 'data': data}

    def local_connection_info(self, volume, connector):
        return self.initialize_connection(volume, connector)

    # -- force-detach hooks ------------------------------------------------

    def revoke_host_access(self, volume, connector):
        """Nothing to revoke on a target: say whether other hosts stay."""
        if connector is None:
            return False
        return bool(fd_attachments.of_other_hosts(volume.volume_attachment,
                                                  connector))

    def fence_clients(self, volume, connectors, keep_attachments):
        """Blocklist the clients of *connectors* that hold the image.

        Clients no attachment explains fail it before anything is done
        (see :func:`select_fence_targets`).

        :returns: the fenced client addresses.
        :raises FenceFailed: a client is unexplained, or a selected client
            still holds the image.
        """
        connectors = list(connectors or [])
        keep = [getattr(a, 'connector', None)
                for a in keep_attachments or []]
        if not connectors and not keep:
            return []
        with self._cluster() as (client, ioctx):
            try:
                image = rbd.Image(ioctx, volume.name)
            except rbd.ImageNotFound:
                LOG.info('Volume %s has no RBD image: nothing to fence.',
                         volume.id)
                return []
            with image:
                own = [client.get_addrs()]
                holders = self._holders(ioctx, image, volume.name)
                try:
                    targets, spared = select_fence_targets(
                        [addr for _kind, addr in holders], own, connectors,
                        keep)
                except UnexplainedClients as err:
                    raise FenceFailed(volume_id=volume.id,
                                      reason=_unexplained(err, holders))
                for addr, why in spared:
                    if why != 'this driver':
                        LOG.info('Volume %(vol)s: client %(addr)s is not '
                                 'fenced (%(why)s).', {'vol': volume.id,
                                                       'addr': addr,
                                                       'why': why})
                if not targets:
                    LOG.info('Volume %s: no client of the detached host(s) '
                             'holds the image; nothing to fence.', volume.id)
                    return []
                self._record_fences(ioctx, volume, targets, connectors)
                for addr in targets:
                    self._blocklist_add(client, volume, addr)
                self._break_locks(ioctx, image, targets)
                self._wait_released(ioctx, image, volume, targets)
        LOG.warning('Volume %(vol)s: fenced client(s) %(addrs)s '
                    '(blocklisted for %(exp)d s, locks broken).',
                    {'vol': volume.id, 'addrs': ', '.join(targets),
                     'exp': self.configuration.
                     forcedetach_rbd_blocklist_expire_seconds})
        return targets

    @staticmethod
    def _lockers(ioctx, name):
        """``[(client, cookie, addr)]`` read from the image header now.

        A fresh read-only handle: the handle that broke a lock keeps
        listing it from its cache.
        """
        with rbd.Image(ioctx, name, read_only=True) as fresh:
            return list((fresh.list_lockers() or {}).get('lockers', []))

    def _holders(self, ioctx, image, name):
        """``[(kind, addr)]`` of clients that watch or lock the image."""
        holders = [('watcher', w['addr']) for w in image.watchers_list()]
        try:
            holders += [('lock owner', o['owner'])
                        for o in image.lock_get_owners()]
        except (rbd.InvalidArgument, rbd.ImageNotFound):
            pass        # no exclusive-lock feature, or no owner
        holders += [('locker', addr)
                    for _c, _cookie, addr in self._lockers(ioctx, name)]
        return holders

    def _blocklist_add(self, client, volume, addr):
        expire = self.configuration.forcedetach_rbd_blocklist_expire_seconds
        cmd = {'prefix': 'osd blocklist', 'blocklistop': 'add',
               'addr': addr, 'expire': float(expire)}
        ret, _out, err = client.mon_command(json.dumps(cmd), b'')
        if ret:
            raise FenceFailed(volume_id=volume.id, reason=_(
                'osd blocklist add %(addr)s failed (%(ret)d): %(err)s') % {
                    'addr': addr, 'ret': ret, 'err': err})
        LOG.info('Volume %(vol)s: %(msg)s', {'vol': volume.id, 'msg': err})

    def _break_locks(self, ioctx, image, targets):
        targets = set(targets)
        try:
            owners = list(image.lock_get_owners())
        except (rbd.InvalidArgument, rbd.ImageNotFound):
            owners = []
        for owner in owners:
            if normalize_addr(owner['owner']) in targets:
                try:
                    image.lock_break(owner['mode'], owner['owner'])
                except (rbd.ImageNotFound, rbd.InvalidArgument):
                    pass        # released meanwhile
        for client_name, cookie, addr in self._lockers(ioctx,
                                                       image.get_name()):
            if normalize_addr(addr) in targets:
                try:
                    image.break_lock(client_name, cookie)
                except rbd.ImageNotFound:
                    pass

    def _wait_released(self, ioctx, image, volume, targets):
        deadline = (time.monotonic() +
                    self.configuration.forcedetach_rbd_fence_verify_timeout)
        targets = set(targets)
        while True:
            left = sorted({'%s (%s)' % (normalize_addr(addr), kind)
                           for kind, addr in self._holders(
                               ioctx, image, volume.name)
                           if normalize_addr(addr) in targets})
            if not left:
                return
            if time.monotonic() >= deadline:
                raise FenceFailed(volume_id=volume.id, reason=_(
                    'still held after blocklisting by %s') % ', '.join(left))
            self._break_locks(ioctx, image, targets)
            time.sleep(0.05)

    # -- fence records -----------------------------------------------------

    def _record_fences(self, ioctx, volume, targets, connectors):
        now = timeutils.utcnow()
        expire = self.configuration.forcedetach_rbd_blocklist_expire_seconds
        keys, values = [], []
        host_ips = [(c['host'], connector_ips(c)) for c in connectors
                    if c and c.get('host')]
        for addr in targets:
            ip = addr_ip(addr)
            hosts = sorted({host for host, ips in host_ips if ip in ips})
            keys.append('%s/%s' % (volume.id, addr))
            values.append(json.dumps({
                'volume_id': volume.id, 'image': volume.name,
                'pool': self.pool, 'addr': addr, 'ip': ip,
                'hosts': hosts or ['*'],
                'fenced_at': now.isoformat(),
                'expires_at': (now + datetime.timedelta(
                    seconds=expire)).isoformat(),
            }).encode())
        with rados.WriteOpCtx() as op:
            ioctx.set_omap(op, tuple(keys), tuple(values))
            ioctx.operate_write_op(op, FENCES_OBJECT)

    @staticmethod
    def _read_records(ioctx, prefix=''):
        records, after = {}, ''
        while True:
            try:
                with rados.ReadOpCtx() as op:
                    it, _ret = ioctx.get_omap_vals(op, after, prefix, 1000)
                    ioctx.operate_read_op(op, FENCES_OBJECT)
                    batch = [(k, v) for k, v in it]
            except rados.ObjectNotFound:
                return records
            for key, value in batch:
                try:
                    records[key] = json.loads(value)
                except ValueError:
                    LOG.warning('Ignoring a malformed fence record %s.', key)
            if len(batch) < 1000:
                return records
            after = batch[-1][0]

    def _blocklist(self, client):
        """{addr: until} of the cluster's blocklist."""
        entries = self._mon_json(client, {'prefix': 'osd blocklist ls'})
        return {e['addr']: e.get('until') for e in entries}

    def list_fences(self, volume=None):
        """Recorded fences (of *volume*, or all), with ``active`` flags."""
        prefix = '%s/' % volume.id if volume is not None else ''
        with self._cluster() as (client, ioctx):
            records = self._read_records(ioctx, prefix)
            blocklist = self._blocklist(client)
        fences = []
        for _key, rec in sorted(records.items()):
            rec = dict(rec, active=rec['addr'] in blocklist,
                       until=blocklist.get(rec['addr']))
            fences.append(rec)
        return fences

    def lift_fence(self, volume_or_addr):
        """Lift the fences of a volume (object or id) or of one address.

        Removes the blocklist entries and their records; returns the lifted
        addresses.  A client instance that saw its blocklist stays
        unusable: lifting only lets a *new* client from that address in
        before the entry expires, and keeps the OSD map small.
        """
        with self._cluster() as (client, ioctx):
            records = self._read_records(ioctx)
            if hasattr(volume_or_addr, 'id'):
                addrs = {r['addr'] for r in records.values()
                         if r['volume_id'] == volume_or_addr.id}
            elif '/' in str(volume_or_addr) or ':' in str(volume_or_addr):
                addrs = {normalize_addr(volume_or_addr)}
            else:
                addrs = {r['addr'] for r in records.values()
                         if r['volume_id'] == volume_or_addr}
            for addr in sorted(addrs):
                cmd = {'prefix': 'osd blocklist', 'blocklistop': 'rm',
                       'addr': addr}
                ret, _out, err = client.mon_command(json.dumps(cmd), b'')
                if ret:
                    raise exception.VolumeBackendAPIException(data=_(
                        'osd blocklist rm %(addr)s failed (%(ret)d): '
                        '%(err)s; the rbd_user needs the mon cap '
                        '\'allow command "osd blocklist"\' to lift fences') %
                        {'addr': addr, 'ret': ret, 'err': err})
                LOG.info('Lifted fence of client %s.', addr)
            keys = tuple(k for k, r in records.items() if r['addr'] in addrs)
            if keys:
                with rados.WriteOpCtx() as op:
                    ioctx.remove_omap_keys(op, keys)
                    ioctx.operate_write_op(op, FENCES_OBJECT)
        return sorted(addrs)

    # -- images ------------------------------------------------------------

    def _qemu_spec(self, pool, name, snapshot=None):
        conf = self.configuration
        return qemu_rbd_spec(pool, name, user=conf.rbd_user,
                             conf=conf.rbd_ceph_conf or None,
                             keyring=conf.forcedetach_rbd_keyring,
                             snapshot=snapshot)

    def image_destination(self, volume):
        return self._qemu_spec(self.pool, volume.name)

    def open_volume_for_write(self, volume):
        return self._open_file(volume)

    def _open_file(self, volume, read_only=False):
        cluster_cm = self._cluster()
        _client, ioctx = cluster_cm.__enter__()
        try:
            image = rbd.Image(ioctx, volume.name, read_only=read_only)
        except BaseException:
            cluster_cm.__exit__(None, None, None)
            raise
        return _ImageFile(cluster_cm, image)

    def _same_cluster_location(self, context, image_service, image_id):
        """``(pool, image, snap)`` of an ``rbd://`` location here."""
        try:
            direct_url, locations = image_service.get_location(context,
                                                               image_id)
        except (AttributeError, NotImplementedError, exception.NotFound):
            return None
        urls = [direct_url] + [loc.get('url') for loc in locations or []]
        fsid = None
        for url in urls:
            parsed = parse_rbd_location(url)
            if not parsed:
                continue
            fsid = fsid or self._get_fsid()
            if parsed[0] == fsid:
                return parsed[1:]
            LOG.debug('%s is in another Ceph cluster.', url)
        return None

    def clone_image(self, context, volume, image_location, image_meta,
                    image_service):
        """A new volume from a raw same-cluster image: a clone v2."""
        if not image_location or image_meta.get('disk_format') != 'raw':
            return {}, False
        urls = [image_location[0]] + [
            loc.get('url') for loc in image_location[1] or []]
        fsid = None
        for url in urls:
            parsed = parse_rbd_location(url)
            if not parsed:
                continue
            fsid = fsid or self._get_fsid()
            if parsed[0] != fsid:
                continue
            try:
                self._clone_image_to(volume, parsed[1:], volume.name)
            except (rbd.Error, rados.Error,
                    exception.VolumeBackendAPIException) as err:
                LOG.info('Cannot clone %(url)s: %(err)s',
                         {'url': url, 'err': err})
                continue
            return {'provider_location': None}, True
        return {}, False

    def _clone_image_to(self, volume, location, name):
        pool, image_name, snap = location
        with self._cluster() as (client, ioctx):
            src_ioctx = client.open_ioctx(pool)
            try:
                with rbd.Image(src_ioctx, image_name, snapshot=snap,
                               read_only=True) as src:
                    if src.size() > volume.size * units.Gi:
                        raise exception.ImageTooBig(
                            image_id=image_name,
                            reason=_('image is larger than the volume'))
                    fd_image.check_head(image_name, 'raw', src.read(
                        0, min(fd_image.HEAD_BYTES, src.size())))
                    features = self._clone_features(volume, src.features())
                self._clone(src_ioctx, image_name, snap, ioctx, name,
                            features)
            finally:
                src_ioctx.close()
            with rbd.Image(ioctx, name) as new:
                if new.size() < volume.size * units.Gi:
                    new.resize(volume.size * units.Gi)

    def copy_image_to_volume(self, context, volume, image_service, image_id,
                             disable_sparse=False):
        """Write an image onto the volume behind Cinder's image gates.

        * a raw image in this cluster (``rbd://fsid/pool/image/snap``)
          whose head the format inspector passes: the volume becomes a
          copy-on-write clone of that snapshot (unless the volume has
          snapshots or clients, which an in-place write must keep);
        * any other image in this cluster that passes upstream's checks
          (:func:`cinder_forcedetach.image.check_source`): ``qemu-img
          convert`` reads it from its pool into the volume's RBD image;
        * otherwise the generic path: the image service's download, a raw
          stream or upstream's ``fetch_to_raw`` and then qemu-img.

        A reimage (``disable_sparse``) by qemu-img discards the volume once
        every check has passed, so qemu-img may skip the image's holes
        instead of writing zeros.
        """
        meta = image_service.show(context, image_id)
        fmt = meta.get('disk_format') or 'raw'
        fd_image.check_allowed(image_id, fmt, self.configuration.safe_get(
            'forcedetach_image_formats'))
        location = None
        if meta.get('container_format') != 'compressed':
            location = self._same_cluster_location(context, image_service,
                                                   image_id)
        if location and fmt == 'raw' and self._reimage_by_clone(
                volume, location, image_id):
            return 'clone'
        if location and self._convert_from_cluster(
                volume, location, image_id, fmt, sparse=not disable_sparse):
            return 'qemu-img'
        return super(RBDDriver, self).copy_image_to_volume(
            context, volume, image_service, image_id,
            disable_sparse=disable_sparse,
            discard=lambda: self._discard_all(volume) or True)

    def _read_head(self, location):
        """The first bytes of a same-cluster image, for the inspector."""
        pool, name, snap = location
        with self._cluster(pool) as (_client, ioctx):
            with rbd.Image(ioctx, name, snapshot=snap,
                           read_only=True) as image:
                return image.read(0, min(fd_image.HEAD_BYTES, image.size()))

    def _discard_all(self, volume):
        """Deallocate every object of the volume: it then reads zeros.

        What a reimage must not leave behind is old data in the image's
        holes; discarding whole objects (volume sizes are whole GiB) is
        cheaper than writing zeros, and ``qemu-img convert`` can then skip
        the image's holes.  Snapshots keep their data (copy-on-write).
        """
        with self._cluster() as (_client, ioctx):
            with rbd.Image(ioctx, volume.name) as image:
                size = image.size()
                # librbd returns the length discarded as an int: at most
                # 2 GiB per call.
                for offset in range(0, size, units.Gi):
                    image.discard(offset, min(units.Gi, size - offset))

    def _reimage_by_clone(self, volume, location, image_id):
        name = volume.name
        tmp, old = name + REIMAGE_TMP_SUFFIX, name + REIMAGE_OLD_SUFFIX
        with self._cluster() as (_client, ioctx):
            self._recover_reimage(ioctx, name, old)
            with rbd.Image(ioctx, name, read_only=True) as current:
                if list(current.watchers_list()):
                    LOG.info('Volume %s is open by a client: reimage '
                             'writes in place.', volume.id)
                    return False
                if list(current.list_snaps()):
                    LOG.info('Volume %s has snapshots: reimage writes in '
                             'place to keep them.', volume.id)
                    return False
            for stale in (tmp, old):
                self._remove_image(ioctx, stale, volume)
        try:
            self._clone_image_to(volume, location, tmp)
        except (rbd.Error, rados.Error,
                exception.VolumeBackendAPIException) as err:
            LOG.info('Cannot clone image %(img)s for volume %(vol)s '
                     '(%(err)s): writing it in place.',
                     {'img': image_id, 'vol': volume.id, 'err': err})
            return False
        with self._cluster() as (_client, ioctx):
            if self.configuration.forcedetach_rbd_reimage_flatten:
                with rbd.Image(ioctx, tmp) as new:
                    new.flatten()
            rbd.RBD().rename(ioctx, name, old)
            rbd.RBD().rename(ioctx, tmp, name)
            try:
                rbd.RBD().remove(ioctx, old)
            except rbd.Error as err:
                LOG.warning('Old image %(old)s of volume %(vol)s not '
                            'removed (%(err)s); it goes with the volume.',
                            {'old': old, 'vol': volume.id, 'err': err})
        LOG.info('Volume %(vol)s is now a clone of image %(img)s '
                 '(%(pool)s/%(name)s@%(snap)s).',
                 {'vol': volume.id, 'img': image_id, 'pool': location[0],
                  'name': location[1], 'snap': location[2]})
        return True

    @staticmethod
    def _recover_reimage(ioctx, name, old):
        """Put back a volume a crash left renamed to ``.reimage-old``."""
        try:
            rbd.Image(ioctx, name, read_only=True).close()
        except rbd.ImageNotFound:
            LOG.warning('RBD image %(name)s missing, %(old)s present: '
                        'an interrupted reimage; restoring it.',
                        {'name': name, 'old': old})
            rbd.RBD().rename(ioctx, old, name)

    def _convert_from_cluster(self, volume, location, image_id, fmt,
                              sparse=True):
        """qemu-img from the image's pool, once upstream's checks pass.

        Returns False when the image's head did not settle its format.
        """
        pool, name, snap = location
        source = self._qemu_spec(pool, name, snapshot=snap)
        qfmt = fd_image.check_source(image_id, fmt, source,
                                     self._read_head(location), volume.size,
                                     execute=self._execute)
        if not qfmt:
            LOG.info('Image %s: its head does not settle its format; '
                     'fetching it instead.', image_id)
            return False
        if not sparse:
            self._discard_all(volume)
        cmd = ['qemu-img', 'convert', '-n', '-f', qfmt, '-O', 'raw']
        self._execute(*(cmd + [source, self.image_destination(volume)]))
        LOG.info('Image %(img)s written into volume %(vol)s by qemu-img '
                 'from %(pool)s/%(name)s.', {'img': image_id,
                                             'vol': volume.id,
                                             'pool': pool, 'name': name})
        return True

    def copy_volume_to_image(self, context, volume, image_service,
                             image_meta):
        if (image_meta.get('disk_format') == 'raw' and
                image_meta.get('container_format') != 'compressed'):
            with self._open_file(volume, read_only=True) as volume_file:
                volume_utils.upload_volume(context, image_service,
                                           image_meta, None, volume,
                                           run_as_root=False,
                                           volume_fd=volume_file)
            return
        tmp_dir = volume_utils.image_conversion_dir()
        with tempfile.NamedTemporaryFile(dir=tmp_dir,
                                         prefix='rbd_upload_') as tmp:
            self._export_sparse(volume, tmp)
            volume_utils.upload_volume(context, image_service, image_meta,
                                       tmp.name, volume, run_as_root=False)

    def _export_sparse(self, volume, out, chunk=4 * units.Mi):
        with self._open_file(volume, read_only=True) as src:
            size = src.seek(0, os.SEEK_END)
            src.seek(0)
            out.truncate(size)
            pos = 0
            while pos < size:
                data = src.read(min(chunk, size - pos))
                if data.count(0) != len(data):
                    out.seek(pos)
                    out.write(data)
                pos += len(data)
            out.flush()

    def get_volume_stats(self, refresh=False):
        if refresh or not self._stats:
            self._update_volume_stats()
        return self._stats
