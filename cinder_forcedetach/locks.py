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

"""The volume's lock, across volume services (tooz via cinder.coordination).

What grants access to a volume and what removes it take the same lock: the
force-detach flow, the mixin's wrappers of Cinder's calls and the target's
re-export after an extend.  A lease the lock service no longer confirms
(etcd unreachable) stops a step rather than let it run unlocked.
"""

from __future__ import annotations

import base64
import contextlib
import types
from typing import Iterator, Optional, TYPE_CHECKING, TypeGuard

from cinder import coordination
from oslo_log import log as logging
import tooz
from tooz import locking

from cinder_forcedetach import exception as fd_exception

if TYPE_CHECKING:
    from cinder import objects
    from tooz.drivers.etcd3gw import Etcd3Lock

tooz_etcd3gw: Optional[types.ModuleType]
try:
    from tooz.drivers import etcd3gw as tooz_etcd3gw
except ImportError:  # pragma: no cover - etcd3gw is optional for tooz
    # A node whose coordination backend is not etcd3gw need not have it.
    tooz_etcd3gw = None

LOG = logging.getLogger(__name__)


def lock_name(volume_id: str) -> str:
    """Name of the coordination lock that serialises a volume's teardown."""
    return 'cinder-forcedetach-%s' % volume_id


def volume_lock(volume_id: str) -> locking.Lock:
    """The volume's tooz lock (a context manager), across volume services."""
    return coordination.COORDINATOR.get_lock(lock_name(volume_id))


@contextlib.contextmanager
def held(volume_id: str) -> Iterator[locking.Lock]:
    """The volume's lock, held for a ``with`` block; see :func:`release`."""
    lock = volume_lock(volume_id)
    lock.acquire(blocking=True)
    try:
        yield lock
    finally:
        release(lock)


def _is_etcd3gw(lock: locking.Lock) -> TypeGuard[Etcd3Lock]:
    return tooz_etcd3gw is not None and isinstance(lock,
                                                   tooz_etcd3gw.Etcd3Lock)


def lock_is_ours(lock: locking.Lock) -> bool:
    """Whether the lock service still confirms *lock* is held by us.

    tooz's ``is_still_owner``; its etcd3gw driver has none, so there the
    lock's lease is refreshed and its key read back.  A lock service that
    cannot be asked answers False.  A driver that can tell neither way
    (tooz's mysql, pgsql) is taken at its word.
    """
    try:
        try:
            return bool(lock.is_still_owner())
        except tooz.NotImplemented:
            pass
        if _is_etcd3gw(lock):
            return _etcd3gw_lock_is_ours(lock)
        return True
    except Exception as err:
        LOG.warning('The lock service cannot confirm lock %(lock)s: '
                    '%(err)s', {'lock': lock.name, 'err': err})
        return False


def _etcd3gw_lock_is_ours(lock: Etcd3Lock) -> bool:
    # tooz's Etcd3Lock: a key bound to a lease, holding the lock's uuid.
    # _lease is set by acquire() in a closure, which tooz's hints miss.
    if not lock.acquired or (
            lock._lease.refresh() <= 0):  # type: ignore[attr-defined]
        return False
    return lock._coord.client.get(lock._key) == [
        base64.b64decode(lock._uuid)]


def check_lock(lock: Optional[locking.Lock], volume: objects.Volume,
               step: str) -> None:
    """Raise ``LockLost`` unless the lock service confirms *lock*.

    *lock* None: the caller holds no lock of its own to check.
    """
    if lock is not None and not lock_is_ours(lock):
        raise fd_exception.LockLost(volume_id=volume.id, step=step,
                                    reason='lease lost or service '
                                           'unreachable')


def release(lock: locking.Lock) -> None:
    """Release *lock*; a lock that cannot be released is forgotten.

    tooz's etcd3gw coordinator goes on refreshing the lease of a lock whose
    release failed: once etcd is back the volume would stay locked for
    good.  And a lock whose lease had ended (its key gone, or another's)
    releases nothing and stays in the coordinator's list, its dead lease
    refreshed at every heartbeat.  Forgotten, neither happens.
    """
    try:
        released = lock.release()
    except Exception as err:
        LOG.warning('Could not release lock %(lock)s (%(err)s); it expires '
                    'with its lease.', {'lock': lock.name, 'err': err})
    else:
        if released is not False:
            return
        LOG.warning('Lock %s was no longer ours when released (its lease '
                    'had ended).', lock.name)
    if _is_etcd3gw(lock):
        lock._coord._acquired_locks.discard(lock)
