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

"""Fencing of the librbd clients that still hold a force-detached image.

Upstream's RBD driver has nothing to revoke on detach: a hypervisor that
Cinder force-detached keeps its librbd client, its watch and the image's
exclusive lock, and goes on writing.  :class:`Fencing` cuts such clients
off the way Ceph intends it (``osd blocklist`` / lock break):

1. find who holds the image: its watchers, the exclusive lock's owner and
   any advisory lockers, by client address (``IP:PORT/NONCE``);
2. select the clients to fence (:func:`select_fence_targets`): never our
   own connection; with no attachment staying, every other client;
   otherwise (multiattach) the clients at an IP of the hosts being
   detached, sparing those at an IP of an attachment that stays.  A
   client at an IP of both, or of neither, fails the fence before anything
   is done: nothing in Cinder says whose it is;
3. record the fence (an omap entry of the ``cinder-forcedetach.fences``
   object in the volume pool) so operators can list and lift it;
4. ``osd blocklist add ADDR EXPIRE`` each one (that client instance,
   nonce included), then break the locks it owned;
5. check, for a bounded time, that none of them still holds the image,
   and raise :class:`FenceFailed` otherwise, so Cinder's database is not
   reset over a client that can still write.

A fenced client's next I/O fails with ``ConnectionShutdown`` (errno 108);
a new client opens the image and writes at once.  A run with nothing left
to fence is a success, and a run after a crash between the blocklist and
the lock break finishes the job (the dead lock owner is still selected).
"""

import datetime
import ipaddress
import json
import socket
import time

from cinder import exception
from cinder.i18n import _
from oslo_log import log as logging
from oslo_utils import timeutils

from cinder_forcedetach import attachments as fd_attachments
from cinder_forcedetach.ceph import cluster

rados = cluster.rados
rbd = cluster.rbd

LOG = logging.getLogger(__name__)

FENCES_OBJECT = 'cinder-forcedetach.fences'


class FenceFailed(exception.VolumeBackendAPIException):
    message = _('Could not fence the clients of volume %(volume_id)s: '
                '%(reason)s')


# -- client addresses (pure, unit tested without Ceph) -----------------------


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


# -- the cluster side ---------------------------------------------------------


class Fencing(object):
    """Fence, list and lift the clients of images in one pool.

    :param access: a :class:`cinder_forcedetach.ceph.cluster.Access`.
    :param expire_seconds: lifetime of a blocklist entry.
    :param verify_timeout: seconds fenced clients have to lose their
        watches and locks before the fence is declared failed.
    """

    def __init__(self, access, pool, expire_seconds, verify_timeout):
        self.access = access
        self.pool = pool
        self.expire_seconds = expire_seconds
        self.verify_timeout = verify_timeout

    def fence(self, volume, connectors, keep_attachments):
        """Blocklist the clients of *connectors* that hold *volume*'s image.

        :returns: the fenced client addresses.
        :raises FenceFailed: a client is unexplained, or a selected client
            still holds the image.
        """
        connectors = list(connectors or [])
        keep = [getattr(a, 'connector', None)
                for a in keep_attachments or []]
        if not connectors and not keep:
            return []
        with cluster.connect(self.access, self.pool) as (client, ioctx):
            try:
                image = rbd.Image(ioctx, volume.name)
            except rbd.ImageNotFound:
                LOG.info('Volume %s has no RBD image: nothing to fence.',
                         volume.id)
                return []
            with image:
                holders = self._holders(ioctx, image, volume.name)
                try:
                    targets, spared = select_fence_targets(
                        [addr for _kind, addr in holders],
                        [client.get_addrs()], connectors, keep)
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
                self._record(ioctx, volume, targets, connectors)
                for addr in targets:
                    self._blocklist_add(client, volume, addr)
                self._break_locks(ioctx, image, targets)
                self._wait_released(ioctx, image, volume, targets)
        LOG.warning('Volume %(vol)s: fenced client(s) %(addrs)s '
                    '(blocklisted for %(exp)d s, locks broken).',
                    {'vol': volume.id, 'addrs': ', '.join(targets),
                     'exp': self.expire_seconds})
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
        cmd = {'prefix': 'osd blocklist', 'blocklistop': 'add',
               'addr': addr, 'expire': float(self.expire_seconds)}
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
        deadline = time.monotonic() + self.verify_timeout
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

    # -- records -----------------------------------------------------------

    def _record(self, ioctx, volume, targets, connectors):
        now = timeutils.utcnow()
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
                    seconds=self.expire_seconds)).isoformat(),
            }).encode())
        with rados.WriteOpCtx() as op:
            ioctx.set_omap(op, tuple(keys), tuple(values))
            ioctx.operate_write_op(op, FENCES_OBJECT)

    def holders(self):
        """``{image: [(kind, addr)]}`` of the pool's images live clients hold.

        Every image's watchers, lock owners and lockers, in one connection;
        this driver's own client and blocklisted clients are left out (a
        fenced client holds nothing it can use).
        """
        result = {}
        with cluster.connect(self.access, self.pool) as (client, ioctx):
            ignored = self._ignored(client)
            for name in rbd.RBD().list(ioctx):
                live = self._live_holders(ioctx, name, ignored)
                if live:
                    result[name] = live
        return result

    def image_holders(self, name):
        """``[(kind, addr)]`` of the live clients holding image *name*."""
        with cluster.connect(self.access, self.pool) as (client, ioctx):
            return self._live_holders(ioctx, name, self._ignored(client))

    @staticmethod
    def _ignored(client):
        """This driver's own client and every blocklisted one."""
        return {normalize_addr(client.get_addrs())} | {
            normalize_addr(e['addr']) for e in cluster.mon_json(
                client, {'prefix': 'osd blocklist ls'})}

    def _live_holders(self, ioctx, name, ignored):
        try:
            with rbd.Image(ioctx, name, read_only=True) as image:
                holders = self._holders(ioctx, image, name)
        except rbd.ImageNotFound:
            return []               # deleted while we listed
        live, seen = [], set()
        for kind, raw in holders:
            addr = normalize_addr(raw)
            if addr and addr not in ignored | seen:
                seen.add(addr)
                live.append((kind, addr))
        return live

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

    def list(self, volume_id=None):
        """Recorded fences (of *volume_id*, or all), with ``active`` flags."""
        prefix = '%s/' % volume_id if volume_id is not None else ''
        with cluster.connect(self.access, self.pool) as (client, ioctx):
            records = self._read_records(ioctx, prefix)
            blocklist = {e['addr']: e.get('until') for e in cluster.mon_json(
                client, {'prefix': 'osd blocklist ls'})}
        return [dict(rec, active=rec['addr'] in blocklist,
                     until=blocklist.get(rec['addr']))
                for _key, rec in sorted(records.items())]

    def lift(self, volume_id=None, addr=None):
        """Lift the fences of a volume, or of one client address.

        Removes the blocklist entries and their records; returns the lifted
        addresses.  A client instance that saw its blocklist stays
        unusable: lifting only lets a *new* client from that address in
        before the entry expires, and keeps the OSD map small.
        """
        with cluster.connect(self.access, self.pool) as (client, ioctx):
            records = self._read_records(ioctx)
            if addr is not None:
                addrs = {normalize_addr(addr)}
            else:
                addrs = {r['addr'] for r in records.values()
                         if r['volume_id'] == volume_id}
            for one in sorted(addrs):
                cmd = {'prefix': 'osd blocklist', 'blocklistop': 'rm',
                       'addr': one}
                ret, _out, err = client.mon_command(json.dumps(cmd), b'')
                if ret:
                    raise exception.VolumeBackendAPIException(data=_(
                        'osd blocklist rm %(addr)s failed (%(ret)d): '
                        '%(err)s; the rbd_user needs the mon cap '
                        '\'allow command "osd blocklist"\' to lift fences') %
                        {'addr': one, 'ret': ret, 'err': err})
                LOG.info('Lifted fence of client %s.', one)
            keys = tuple(k for k, r in records.items() if r['addr'] in addrs)
            if keys:
                with rados.WriteOpCtx() as op:
                    ioctx.remove_omap_keys(op, keys)
                    ioctx.operate_write_op(op, FENCES_OBJECT)
        return sorted(addrs)
