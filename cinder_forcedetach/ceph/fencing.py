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

:meth:`Fencing.fence_host` does steps 1-5 for many volumes of one host at
once (a host fence): one connection, the holders of every image read in
parallel, the same selection per volume (:func:`select_host_targets`),
one record write, each distinct blocklist entry added once, all of them
in flight together (the monitor commits them in one or two OSD map
epochs instead of one epoch per volume), then one bounded wait for every
image.  A volume whose clients cannot be explained fails alone.

Blocklist entries on Ceph 16.2.15 (Pacific), as measured: ``osd blocklist
add IP:PORT/NONCE`` cuts that client instance; ``osd blocklist add IP``
(stored as ``IP:0/0``) cuts every client at that IP, present and future;
``osd blocklist range add CIDR`` exists too (stored as ``cidr:...``,
listed after the address list).  Beware ``osd blocklist add
10.0.0.0/24``: it is taken as the *address* ``10.0.0.0:0/24`` (nonce 24)
and cuts nothing.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import ipaddress
import json
import socket
import threading
import time
import types
from typing import (Any, Callable, Collection, Iterable, Iterator, List,
                    Mapping, Optional, Sequence, TYPE_CHECKING, TypeVar)

import eventlet

from cinder import exception
from cinder.i18n import _
from oslo_log import log as logging
from oslo_utils import timeutils

from cinder_forcedetach import attachments as fd_attachments
from cinder_forcedetach.ceph import cluster

if TYPE_CHECKING:
    from cinder import objects

    #: A host's connector.
    Connector = dict[str, Any]
    #: A name resolver: host name -> its IP addresses.
    Resolve = Callable[[str], Iterable[str]]
    #: ``[(kind, client address)]``: who holds an image.
    Holders = list[tuple[str, str]]

_T = TypeVar('_T')

rados = cluster.rados
rbd = cluster.rbd

LOG = logging.getLogger(__name__)

FENCES_OBJECT = 'cinder-forcedetach.fences'


class FenceFailed(exception.VolumeBackendAPIException):
    message = _('Could not fence the clients of volume %(volume_id)s: '
                '%(reason)s')


# -- client addresses (pure, unit tested without Ceph) -----------------------


def normalize_addr(addr: Optional[str]) -> str:
    """A client address as the blocklist takes it: ``IP:PORT/NONCE``."""
    addr = (addr or '').strip()
    if addr.startswith('[') and addr.endswith(']') and ',' not in addr:
        addr = addr[1:-1]           # a one-entry addrvec
    for prefix in ('v1:', 'v2:', 'any:'):
        if addr.startswith(prefix):
            addr = addr[len(prefix):]
    return addr


def addr_ip(addr: Optional[str]) -> str:
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


def _ip_literal(value: Any) -> Optional[str]:
    try:
        return str(ipaddress.ip_address(str(value).strip('[]')))
    except ValueError:
        return None


def connector_ips(connector: Optional[Connector],
                  resolve: Optional[Resolve] = None) -> set[str]:
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


def _resolve(name: str) -> list[str]:
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

    def __init__(self, clients: list[tuple[str, str]]) -> None:
        super(UnexplainedClients, self).__init__(
            '; '.join('%s: %s' % c for c in clients))
        self.clients = clients


def select_fence_targets(holders: Iterable[str],
                         own_addrs: Optional[Iterable[str]],
                         connectors: Collection[Optional[Connector]],
                         keep_connectors: Optional[
                             Iterable[Optional[Connector]]],
                         resolve: Optional[Resolve] = None
                         ) -> tuple[list[str], list[tuple[str, str]]]:
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


def _unexplained(err: UnexplainedClients, holders: Holders) -> str:
    """The operator's error for :class:`UnexplainedClients`."""
    kinds: dict[str, set[str]] = {}
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


# -- a host fence: many volumes of one host (pure, unit tested) --------------

#: Why a batch fails a volume whose target another volume's attachment keeps.
KEPT_ELSEWHERE = ('it also holds volume %s for an attachment that stays: '
                  'blocklisting it would cut that one too')


def holders_from(watchers: Optional[Iterable[dict[str, Any]]],
                 lockers: Any) -> Holders:
    """``[(kind, addr)]`` from what one read-only image handle shows.

    *watchers*: ``Image.watchers_list()``; *lockers*: ``Image.list_lockers()``
    of a handle opened just now (a handle caches them).  The exclusive
    lock is a locker of tag ``internal`` whose cookie starts with
    ``auto ``: its ``lock owner``; anything else is an advisory ``locker``.
    """
    holders = [('watcher', w['addr']) for w in watchers or ()]
    lockers = lockers if isinstance(lockers, dict) else {}
    internal = lockers.get('tag') == 'internal'
    for _client, cookie, addr in lockers.get('lockers') or ():
        kind = ('lock owner' if internal and str(cookie).startswith('auto ')
                else 'locker')
        holders.append((kind, addr))
    return holders


def ip_entry(ip: str) -> str:
    """The blocklist entry that cuts every client at *ip*: ``IP:0/0``.

    What ``osd blocklist add IP`` stores; the OSDs match a client against
    it by IP whatever its port and nonce.
    """
    address = ipaddress.ip_address(ip)
    host = '[%s]' % address if address.version == 6 else str(address)
    return '%s:0/0' % host


def _ip_entry_of(addr: str) -> Optional[str]:
    """The IP-wide entry that would cover client *addr* (or None)."""
    try:
        return ip_entry(addr_ip(addr))
    except ValueError:
        return None


def _entry(record: dict[str, Any]) -> str:
    """The blocklist entry a fence record was made with."""
    return record.get('entry') or record['addr']


def memoized(resolve: Optional[Resolve] = None
             ) -> Callable[[str], list[str]]:
    """*resolve* (default: the system resolver), asked once per name."""
    resolve = resolve or _resolve
    cache = {}

    def cached(name: str) -> list[str]:
        if name not in cache:
            cache[name] = list(resolve(name))
        return cache[name]
    return cached


def select_host_targets(holders: dict[str, list[str]],
                        own_addrs: Optional[Collection[str]],
                        connector: Optional[Connector],
                        keep_connectors: Mapping[
                            str, Iterable[Optional[Connector]]],
                        resolve: Optional[Resolve] = None
                        ) -> tuple[dict[str, list[str]],
                                   dict[str, list[tuple[str, str]]],
                                   dict[str, list[tuple[str, str]]]]:
    """Which clients a host fence cuts, volume by volume.

    :param holders: ``{volume_id: [addr]}``: who holds each image.
    :param own_addrs: this driver's own client address(es).
    :param connector: the host that leaves every one of these volumes.
    :param keep_connectors: ``{volume_id: [connector or None]}``: one entry
        per attachment of that volume that stays (another host's).
    :returns: ``(targets, failed, spared)``: ``{volume_id: sorted addrs}``
        of the volumes to fence (empty list: nothing holds it),
        ``{volume_id: [(addr, why)]}`` of the volumes whose clients cannot
        be decided on (the rules of :func:`select_fence_targets`, one volume
        at a time), and ``{volume_id: [(addr, why)]}`` of holders left
        alone.  A client one volume would fence while another volume's
        staying attachment holds it (one client instance with two images)
        fails the first volume: blocklisting it would cut the other.
    """
    resolve = memoized(resolve)
    targets: dict[str, list[str]] = {}
    failed: dict[str, list[tuple[str, str]]] = {}
    spared: dict[str, list[tuple[str, str]]] = {}
    kept_by: dict[str, str] = {}
    for volume_id, addrs in holders.items():
        try:
            chosen, left = select_fence_targets(
                addrs, own_addrs, [connector],
                keep_connectors.get(volume_id) or (), resolve)
        except UnexplainedClients as err:
            failed[volume_id] = list(err.clients)
            continue
        targets[volume_id] = chosen
        spared[volume_id] = left
        for addr, why in left:
            if why != 'this driver':
                kept_by.setdefault(addr, volume_id)
    for volume_id in sorted(targets):
        crossed = [(addr, KEPT_ELSEWHERE % kept_by[addr])
                   for addr in targets[volume_id]
                   if kept_by.get(addr, volume_id) != volume_id]
        if crossed:
            failed[volume_id] = crossed
            del targets[volume_id]
    return targets, failed, spared


def blocklist_entries(targets: dict[str, list[str]],
                      host_ips: Iterable[str] = (), ip_wide: bool = False,
                      keep_ips: Iterable[str] = (),
                      own_addrs: Optional[Iterable[str]] = ()
                      ) -> dict[str, str]:
    """``{addr: entry}``: the blocklist entry that fences each target.

    The address itself (that client instance), or with *ip_wide* the
    IP-wide entry (:func:`ip_entry`) of a target at one of the host's IPs
    (*host_ips*), unless that IP is also one of an attachment that stays
    (*keep_ips*) or our own client's: those keep per-address entries.
    """
    wide = set()
    if ip_wide:
        wide = (set(host_ips) - set(keep_ips) -
                {addr_ip(a) for a in own_addrs or ()})
    entries = {}
    for addrs in targets.values():
        for addr in addrs:
            ip = addr_ip(addr)
            entries[addr] = ip_entry(ip) if ip in wide else addr
    return entries


def native_threading() -> types.ModuleType:
    """The threading module whose threads are the kernel's.

    cinder-volume runs under eventlet, whose patched threads are green:
    librados and librbd calls (which release the GIL) would then run one
    after the other, each blocking the hub.
    """
    if eventlet.patcher.is_monkey_patched('thread'):
        return eventlet.patcher.original('threading')
    return threading


def in_threads(func: Callable[[_T], Any], items: Iterable[_T], workers: int
               ) -> list[tuple[Any, Optional[Exception]]]:
    """``[(result, error)]`` of ``func(item)`` for each item, in order.

    Up to *workers* native threads (:func:`native_threading`).  *func*
    must call nothing eventlet patches (no logging, no green locks): only
    librados and librbd.
    """
    items = list(items)
    # Every slot is filled before it is returned.
    results: list[Any] = [None] * len(items)

    def one(i: int) -> None:
        try:
            results[i] = (func(items[i]), None)
        except Exception as err:
            results[i] = (None, err)

    if len(items) <= 1 or workers <= 1:
        for i in range(len(items)):
            one(i)
        return results
    threading_ = native_threading()
    lock = threading_.Lock()
    indexes = iter(range(len(items)))

    def work() -> None:
        while True:
            with lock:
                i = next(indexes, None)
            if i is None:
                return
            one(i)

    threads = [threading_.Thread(target=work, daemon=True)
               for _ in range(min(workers, len(items)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


#: What :meth:`Fencing.fence_host` returns: ``fenced`` is ``{volume_id:
#: [client addresses fenced]}`` (empty: nothing of that host held it),
#: ``failed`` is ``{volume_id: FenceFailed}``; ``entries`` is ``{addr:
#: blocklist entry}`` of every client selected.
HostFence = collections.namedtuple('HostFence', 'fenced failed entries')


# -- the cluster side ---------------------------------------------------------


def _read_image(ioctx: Any, name: str) -> Optional[tuple[Holders, Any]]:
    """``([(kind, addr)], lockers)`` of image *name*, or None if it is gone.

    Called in a native thread (:func:`in_threads`): librbd only.
    """
    try:
        image = rbd.Image(ioctx, name, read_only=True)
    except rbd.ImageNotFound:
        return None
    with image:
        lockers = image.list_lockers()
        return holders_from(image.watchers_list(), lockers), lockers


def _release_image(ioctx: Any, name: str,
                   is_target: Callable[[str], bool]) -> list[str]:
    """Break the locks targets hold on *name*; what targets still hold.

    A fresh read-only handle (a handle caches its lockers; a read-only one
    breaks a lock as well, the exclusive lock included).  Returns the
    ``ADDR (kind)`` of the targets still watching it, and of their locks
    that could not be broken: once their watches are gone and their locks
    broken, none.  Called in a native thread (:func:`in_threads`): librbd
    only.
    """
    try:
        image = rbd.Image(ioctx, name, read_only=True)
    except rbd.ImageNotFound:
        return []
    with image:
        lockers = image.list_lockers()
        held = set()
        for kind, addr in holders_from(image.watchers_list(), lockers):
            addr = normalize_addr(addr)
            if kind == 'watcher' and is_target(addr):
                held.add('%s (%s)' % (addr, kind))
        for client_name, cookie, addr in (
                lockers.get('lockers') or () if isinstance(lockers, dict)
                else ()):
            if is_target(normalize_addr(addr)):
                try:
                    image.break_lock(client_name, cookie)
                except rbd.ImageNotFound:
                    pass        # released meanwhile
        return sorted(held)


class Fencing(object):
    """Fence, list and lift the clients of images in one pool.

    :param access: a :class:`cinder_forcedetach.ceph.cluster.Access`.
    :param expire_seconds: lifetime of a blocklist entry.
    :param verify_timeout: seconds fenced clients have to lose their
        watches and locks before the fence is declared failed.
    """

    #: Native threads that read, break and verify images in parallel in a
    #: host fence, and monitor commands in flight together: the monitor
    #: commits what it has received in one OSD map epoch, then waits
    #: ``paxos_propose_interval`` (1 s by default) before the next one, so
    #: every entry must be in flight at once.
    IMAGE_WORKERS = 16
    MON_WORKERS = 128

    def __init__(self, access: cluster.Access, pool: str,
                 expire_seconds: int, verify_timeout: float) -> None:
        self.access = access
        self.pool = pool
        self.expire_seconds = expire_seconds
        self.verify_timeout = verify_timeout

    @contextlib.contextmanager
    def _connect(self) -> Iterator[tuple[Any, Any]]:
        """``(client, ioctx)`` of a connection whose lock breaks are plain.

        librbd blocklists a lock's owner before it breaks the lock
        (``rbd_blocklist_on_break_lock``): one more monitor command and
        OSD map epoch per lock (~0.1 s on the test cluster, about
        ``paxos_propose_interval``, 1 s by default, in production).  We
        break only locks of clients we blocklisted first, with our own
        lifetime: that second blocklist adds nothing.
        """
        with cluster.connect(self.access, self.pool) as (client, ioctx):
            client.conf_set('rbd_blocklist_on_break_lock', 'false')
            yield client, ioctx

    def fence(self, volume: objects.Volume,
              connectors: Optional[Iterable[Optional[Connector]]],
              keep_attachments: Optional[Iterable[Any]]) -> list[str]:
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
        with self._connect() as (client, ioctx):
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
    def _lockers(ioctx: Any, name: str) -> list[tuple[str, str, str]]:
        """``[(client, cookie, addr)]`` read from the image header now.

        A fresh read-only handle: the handle that broke a lock keeps
        listing it from its cache.
        """
        with rbd.Image(ioctx, name, read_only=True) as fresh:
            return list((fresh.list_lockers() or {}).get('lockers', []))

    def _holders(self, ioctx: Any, image: Any, name: str) -> Holders:
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

    def _blocklist_add(self, client: Any, volume: objects.Volume,
                       addr: str) -> None:
        cmd = {'prefix': 'osd blocklist', 'blocklistop': 'add',
               'addr': addr, 'expire': float(self.expire_seconds)}
        ret, _out, err = client.mon_command(json.dumps(cmd), b'')
        if ret:
            raise FenceFailed(volume_id=volume.id, reason=_(
                'osd blocklist add %(addr)s failed (%(ret)d): %(err)s') % {
                    'addr': addr, 'ret': ret, 'err': err})
        LOG.info('Volume %(vol)s: %(msg)s', {'vol': volume.id, 'msg': err})

    def _break_locks(self, ioctx: Any, image: Any,
                     targets: Iterable[str]) -> None:
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

    def _wait_released(self, ioctx: Any, image: Any, volume: objects.Volume,
                       targets: Iterable[str]) -> None:
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

    # -- a host fence ------------------------------------------------------

    def fence_host(self, volumes: Iterable[objects.Volume],
                   connector: Connector,
                   keep_by_volume: dict[str, Iterable[Any]],
                   ip_wide: bool = False) -> HostFence:
        """Fence the clients one host has on many volumes, all at once.

        The rules of :meth:`fence`, volume by volume, with the cluster work
        shared: one connection; every image's holders read in parallel
        (read-only handles: watchers and lockers, the exclusive lock's
        owner among them); the targets chosen per volume
        (:func:`select_host_targets`); one record write; each distinct
        blocklist entry added once, every one in flight together; then the
        locks of every image broken and one bounded wait until no target
        holds any image.

        :param volumes: the volumes *connector*'s host leaves.
        :param connector: that host's connector.
        :param keep_by_volume: ``{volume_id: [attachments that stay]}``
            (other hosts'; missing: none).
        :param ip_wide: cut each of the host's IPs as a whole (one
            ``IP:0/0`` entry: its clients on every image and pool, and any
            client it starts until the entry expires or is lifted) rather
            than each client instance; not for an IP an attachment that
            stays uses, nor our own.
        :returns: :data:`HostFence`.  A volume whose clients cannot be
            explained, whose blocklist entry the monitors refused or whose
            image is still held at the end is in ``failed`` (a
            :class:`FenceFailed`), the others go on.
        :raises CephUnavailable: the cluster cannot be reached (nothing
            was done).
        """
        volumes = list({v.id: v for v in volumes}.values())
        by_id = {v.id: v for v in volumes}
        keep = {v.id: [getattr(a, 'connector', None)
                       for a in keep_by_volume.get(v.id) or ()]
                for v in volumes}
        resolve = memoized()
        fenced: dict[str, list[str]] = {}
        failed: dict[str, FenceFailed] = {}
        entries: dict[str, str] = {}
        times = [time.monotonic()]
        with self._connect() as (client, ioctx):
            own = client.get_addrs()
            holders = self._read_holders(ioctx, volumes, fenced, failed)
            times.append(time.monotonic())
            targets, unexplained, spared = select_host_targets(
                {vid: [addr for _kind, addr in held]
                 for vid, held in holders.items()},
                [own], connector, keep, resolve)
            for vid, clients in sorted(unexplained.items()):
                failed[vid] = FenceFailed(volume_id=vid, reason=_unexplained(
                    UnexplainedClients(clients), holders[vid]))
            self._log_spared(spared)
            for vid in [vid for vid, addrs in targets.items() if not addrs]:
                fenced[vid] = targets.pop(vid)
            if not targets:
                return HostFence(fenced, failed, entries)
            keep_ips = set()
            for connectors in keep.values():
                for c in connectors:
                    keep_ips |= connector_ips(c, resolve)
            entries = blocklist_entries(
                targets, connector_ips(connector, resolve), ip_wide,
                keep_ips, [own])
            now = timeutils.utcnow()
            self._write_records(ioctx, [
                item for vid in sorted(targets)
                for item in self._record_items(
                    by_id[vid], targets[vid], [connector], now, entries,
                    resolve)])
            refused = self._blocklist_all(client, set(entries.values()))
            # Our next OSD ops carry the new map's epoch: an OSD serves
            # them only once it has that map, i.e. has cut the targets.
            client.wait_for_latest_osdmap()
            times.append(time.monotonic())
            for vid in sorted(targets):
                bad = sorted({entries[a] for a in targets[vid]} & set(
                    refused))
                if bad:
                    failed[vid] = FenceFailed(volume_id=vid, reason='; '.join(
                        refused[e] for e in bad))
                    del targets[vid]
            wide_ips = {addr_ip(e) for e in entries.values()
                        if e.endswith(':0/0')}
            left, rounds = self._wait_all_released(ioctx, {
                vid: (by_id[vid].name, set(targets[vid]))
                for vid in targets}, wide_ips)
            for vid in sorted(targets):
                if vid in left:
                    failed[vid] = FenceFailed(volume_id=vid, reason=_(
                        'still held after blocklisting by %s') %
                        ', '.join(left[vid]))
                else:
                    fenced[vid] = targets[vid]
        times.append(time.monotonic())
        distinct = sorted({entries[a] for addrs in fenced.values()
                           for a in addrs})
        LOG.warning('Host %(host)s fenced on %(n)d volume(s): %(m)d client(s)'
                    ', %(e)d blocklist entr(ies) %(entries)s (for %(exp)d s, '
                    'locks broken); %(f)d volume(s) failed; %(steps)s.', {
                        'host': (connector or {}).get('host'),
                        'n': len(fenced), 'm': sum(map(len, fenced.values())),
                        'e': len(distinct), 'entries': ', '.join(distinct),
                        'exp': self.expire_seconds, 'f': len(failed),
                        'steps': ', '.join(
                            '%s %.2f s' % (what, b - a) for what, a, b in zip(
                                ('holders read', 'selected, recorded and '
                                 'blocklisted', 'locks broken, released '
                                 '(%d rounds)' % rounds),
                                times, times[1:]))})
        return HostFence(fenced, failed, entries)

    def _read_holders(self, ioctx: Any, volumes: Sequence[objects.Volume],
                      fenced: dict[str, list[str]],
                      failed: dict[str, FenceFailed]
                      ) -> dict[str, Holders]:
        """``{volume_id: [(kind, addr)]}`` of every image, read in parallel.

        A volume without an image goes into *fenced* (nothing to fence),
        one whose image cannot be read into *failed*.
        """
        holders = {}
        reads = in_threads(lambda name: _read_image(ioctx, name),
                           [v.name for v in volumes], self.IMAGE_WORKERS)
        for volume, (held, err) in zip(volumes, reads):
            if err is not None:
                failed[volume.id] = FenceFailed(volume_id=volume.id, reason=_(
                    'cannot read who holds its image: %s') % err)
            elif held is None:
                LOG.info('Volume %s has no RBD image: nothing to fence.',
                         volume.id)
                fenced[volume.id] = []
            else:
                holders[volume.id] = held[0]
        return holders

    @staticmethod
    def _log_spared(spared: dict[str, list[tuple[str, str]]]) -> None:
        for vid, left in sorted(spared.items()):
            for addr, why in left:
                if why != 'this driver':
                    LOG.info('Volume %(vol)s: client %(addr)s is not fenced '
                             '(%(why)s).', {'vol': vid, 'addr': addr,
                                            'why': why})

    def _blocklist_all(self, client: Any,
                       entries: Iterable[str]) -> dict[str, str]:
        """Add every blocklist entry, all in flight; ``{entry: error}``.

        The monitor batches the commands it receives together into one OSD
        map epoch: N entries cost about what one does.
        """
        entries = sorted(entries)
        expire = float(self.expire_seconds)

        def add(entry: str) -> Any:
            return client.mon_command(json.dumps({
                'prefix': 'osd blocklist', 'blocklistop': 'add',
                'addr': entry, 'expire': expire}), b'')

        refused = {}
        for entry, (res, err) in zip(entries, in_threads(
                add, entries, self.MON_WORKERS)):
            ret, _out, status = res if err is None else (-1, b'', err)
            if ret:
                refused[entry] = _('osd blocklist add %(addr)s failed '
                                   '(%(ret)d): %(err)s') % {
                    'addr': entry, 'ret': ret, 'err': status}
            else:
                LOG.info('%s', status)
        return refused

    def _wait_all_released(self, ioctx: Any,
                           pending: dict[str, tuple[str, set[str]]],
                           wide_ips: Iterable[str] = ()
                           ) -> tuple[dict[str, list[str]], int]:
        """Break the targets' locks; wait until no image is held by one.

        *pending*: ``{volume_id: (image name, target addrs)}``; a holder at
        an IP of *wide_ips* (cut IP-wide) counts as a target too.  Every
        round reads each image still held through a fresh read-only handle
        and breaks the targets' locks there; one deadline
        (``verify_timeout``) for all.  Returns ``{volume_id: [holders
        left]}`` of the images still held then, and the number of rounds.
        """
        deadline = time.monotonic() + self.verify_timeout
        wide_ips = set(wide_ips)

        def check(item: tuple[str, set[str]]) -> list[str]:
            name, targets = item
            return _release_image(ioctx, name, lambda addr: (
                addr in targets or addr_ip(addr) in wide_ips))

        rounds = 0
        while True:
            ids = sorted(pending)
            checked = in_threads(check, [pending[vid] for vid in ids],
                                 self.IMAGE_WORKERS)
            rounds += 1
            left = {}
            for vid, (held, err) in zip(ids, checked):
                if err is not None:
                    left[vid] = [_('cannot read its image: %s') % err]
                elif held:
                    left[vid] = held
            pending = {vid: pending[vid] for vid in left}
            if not pending or time.monotonic() >= deadline:
                return left, rounds
            time.sleep(0.05)

    # -- records -----------------------------------------------------------

    def _record(self, ioctx: Any, volume: objects.Volume,
                targets: Iterable[str],
                connectors: Iterable[Optional[Connector]]) -> None:
        self._write_records(ioctx, self._record_items(
            volume, targets, connectors, timeutils.utcnow()))

    def _record_items(self, volume: objects.Volume, targets: Iterable[str],
                      connectors: Iterable[Optional[Connector]],
                      now: datetime.datetime,
                      entries: Optional[dict[str, str]] = None,
                      resolve: Optional[Resolve] = None
                      ) -> list[tuple[str, bytes]]:
        """``[(key, value)]`` of the fence records of *volume*'s *targets*.

        *entries*: ``{addr: blocklist entry}`` where the entry is not the
        address itself (an IP-wide entry): recorded as ``entry``.
        """
        items = []
        host_ips = [(c['host'], connector_ips(c, resolve))
                    for c in connectors if c and c.get('host')]
        for addr in targets:
            ip = addr_ip(addr)
            hosts = sorted({host for host, ips in host_ips if ip in ips})
            record = {
                'volume_id': volume.id, 'image': volume.name,
                'pool': self.pool, 'addr': addr, 'ip': ip,
                'hosts': hosts or ['*'],
                'fenced_at': now.isoformat(),
                'expires_at': (now + datetime.timedelta(
                    seconds=self.expire_seconds)).isoformat(),
            }
            entry = (entries or {}).get(addr, addr)
            if entry != addr:
                record['entry'] = entry
            items.append(('%s/%s' % (volume.id, addr),
                          json.dumps(record).encode()))
        return items

    @staticmethod
    def _write_records(ioctx: Any,
                       items: Sequence[tuple[str, bytes]]) -> None:
        """One omap write of every ``(key, value)`` in *items*."""
        if not items:
            return
        keys, values = zip(*items)
        with rados.WriteOpCtx() as op:
            ioctx.set_omap(op, tuple(keys), tuple(values))
            ioctx.operate_write_op(op, FENCES_OBJECT)

    def holders(self) -> dict[str, Holders]:
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

    def image_holders(self, name: str) -> Holders:
        """``[(kind, addr)]`` of the live clients holding image *name*."""
        with cluster.connect(self.access, self.pool) as (client, ioctx):
            return self._live_holders(ioctx, name, self._ignored(client))

    @staticmethod
    def _ignored(client: Any) -> set[str]:
        """This driver's own client and every blocklisted one."""
        return {normalize_addr(client.get_addrs())} | {
            normalize_addr(e['addr']) for e in cluster.mon_json(
                client, {'prefix': 'osd blocklist ls'})}

    def _live_holders(self, ioctx: Any, name: str,
                      ignored: set[str]) -> Holders:
        try:
            with rbd.Image(ioctx, name, read_only=True) as image:
                holders = self._holders(ioctx, image, name)
        except rbd.ImageNotFound:
            return []               # deleted while we listed
        live: Holders = []
        seen: set[str] = set()
        for kind, raw in holders:
            addr = normalize_addr(raw)
            if addr and addr not in ignored | seen and _ip_entry_of(
                    addr) not in ignored:
                seen.add(addr)
                live.append((kind, addr))
        return live

    @staticmethod
    def _read_records(ioctx: Any, prefix: str = ''
                      ) -> dict[str, dict[str, Any]]:
        records: dict[str, dict[str, Any]] = {}
        after = ''
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

    def count_active(self, now: Optional[datetime.datetime] = None) -> int:
        """Fence records whose blocklist entry has not expired yet.

        One omap read (no ``osd blocklist ls``): a record lifted is gone,
        one expired is told by its ``expires_at``.
        """
        now = (now or timeutils.utcnow()).replace(tzinfo=None)
        with cluster.connect(self.access, self.pool) as (_client, ioctx):
            records = self._read_records(ioctx)
        count = 0
        for record in records.values():
            expires: Optional[datetime.datetime]
            try:
                expires = datetime.datetime.fromisoformat(
                    record['expires_at']).replace(tzinfo=None)
            except (KeyError, TypeError, ValueError):
                expires = None      # unknown: counted until lifted
            if expires is None or expires > now:
                count += 1
        return count

    def list(self, volume_id: Optional[str] = None
             ) -> list[dict[str, Any]]:
        """Recorded fences (of *volume_id*, or all), with ``active`` flags."""
        prefix = '%s/' % volume_id if volume_id is not None else ''
        with cluster.connect(self.access, self.pool) as (client, ioctx):
            records = self._read_records(ioctx, prefix)
            blocklist = {e['addr']: e.get('until') for e in cluster.mon_json(
                client, {'prefix': 'osd blocklist ls'})}
        return [dict(rec, active=_entry(rec) in blocklist,
                     until=blocklist.get(_entry(rec)))
                for _key, rec in sorted(records.items())]

    # List: "list" is the method above in this class's scope.
    def lift(self, volume_id: Optional[str] = None,
             addr: Optional[str] = None) -> List[str]:
        """Lift the fences of a volume, or of one client address.

        Removes the blocklist entries and their records; returns the lifted
        entries.  A client instance that saw its blocklist stays
        unusable: lifting only lets a *new* client from that address in
        before the entry expires, and keeps the OSD map small.  A client a
        host fence cut IP-wide is lifted with its IP's entry (``IP:0/0``),
        which frees every client of that IP: every record naming that
        entry goes.
        """
        with cluster.connect(self.access, self.pool) as (client, ioctx):
            records = self._read_records(ioctx)
            if addr is not None:
                addr = normalize_addr(addr)
                addrs = {addr} | {_entry(r) for r in records.values()
                                  if r['addr'] == addr}
            else:
                addrs = {_entry(r) for r in records.values()
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
            keys = tuple(k for k, r in records.items()
                         if _entry(r) in addrs)
            if keys:
                with rados.WriteOpCtx() as op:
                    ioctx.remove_omap_keys(op, keys)
                    ioctx.operate_write_op(op, FENCES_OBJECT)
        return sorted(addrs)
