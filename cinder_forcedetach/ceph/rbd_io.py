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

"""Image I/O on RBD: file objects, copy-on-write reimage, qemu-img.

Everything an image source gives goes through Cinder's own gates first
(:mod:`cinder_forcedetach.image_gates`: the format inspector on the image's
head, upstream's ``check_qcow2_file``/``check_vmdk_image`` checks);
credentials stay in files (``qemu_rbd_spec`` names the keyring file,
never a key).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import functools
import os
from typing import Any, Callable, Optional, TYPE_CHECKING
import urllib.parse

from cinder import exception
from cinder.i18n import _
from oslo_log import log as logging
from oslo_utils import units

from cinder_forcedetach.ceph import cluster
from cinder_forcedetach import image_gates

if TYPE_CHECKING:
    from cinder import context as cinder_context
    from cinder import objects

rados = cluster.rados
rbd = cluster.rbd

LOG = logging.getLogger(__name__)

REIMAGE_TMP_SUFFIX = '.reimage-new'
REIMAGE_OLD_SUFFIX = '.reimage-old'
RBD_URL_PREFIX = 'rbd://'


def parse_rbd_location(url: Optional[str]
                       ) -> Optional[tuple[str, ...]]:
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


def qemu_rbd_spec(pool: str, image: str, user: Optional[str] = None,
                  conf: Optional[str] = None, keyring: Optional[str] = None,
                  snapshot: Optional[str] = None) -> str:
    """A qemu ``rbd:`` file name; credentials only as file paths."""
    def esc(value: str) -> str:
        return (str(value).replace('\\', '\\\\').replace(':', '\\:')
                .replace('@', '\\@'))
    spec = 'rbd:%s/%s' % (esc(pool), esc(image))
    if snapshot:
        spec += '@' + esc(snapshot)
    for key, value in (('id', user), ('conf', conf), ('keyring', keyring)):
        if value:
            spec += ':%s=%s' % (key, esc(value))
    return spec


#: librbd writes an :class:`ImageFile` keeps in flight at most.
WRITE_DEPTH = 8


class ImageFile(object):
    """A sequential binary file on an open RBD image (and its connection).

    Writes are librbd asynchronous writes, at most *depth* in flight:
    ``write()`` returns once librbd has the request (the file keeps the
    buffer until the write completed), waiting for the oldest write first
    when *depth* are out.  Every completion is checked: its callback
    (librbd's thread) records a failure and nothing else, and the file
    reads each completion's return value again when it reaps it.  After a
    failed write every later ``write()`` raises and nothing more is sent;
    ``flush()`` waits for every write, raises the failure if there is one,
    and only then flushes librbd (so a flush that returns means every
    byte written landed); ``close()`` waits for every write too, and
    raises a failure nobody was told of yet.  Reads wait for the writes.
    """

    def __init__(self, connection: contextlib.AbstractContextManager[Any],
                 image: Any, depth: int = WRITE_DEPTH) -> None:
        self._connection = connection
        self._image = image
        self._pos = 0
        self._depth = max(1, depth)
        # (completion, data, offset)
        self._in_flight: collections.deque[tuple[Any, bytes, int]] = (
            collections.deque())
        # (offset, length, ret)
        self._failure: Optional[tuple[int, int, int]] = None
        self._reported = False

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self._raise_failure()
        if not data:
            return 0
        data = bytes(data)
        while len(self._in_flight) >= self._depth:
            self._reap()
            self._raise_failure()
        offset, length = self._pos, len(data)
        completion = self._image.aio_write(
            data, offset, functools.partial(self._completed, offset, length))
        # librbd may write from this very buffer (zero copy): it lives
        # until the completion is reaped
        self._in_flight.append((completion, data, offset))
        self._pos += length
        return length

    def _completed(self, offset: int, length: int, completion: Any) -> None:
        """librbd's completion callback: records a failure, never raises.

        Runs in a librbd thread: no lock, no eventlet primitive.
        """
        self._fail(offset, length, completion.get_return_value())

    def _fail(self, offset: int, length: int, ret: int) -> None:
        if ret < 0 and self._failure is None:
            self._failure = (offset, length, ret)

    def _reap(self) -> None:
        """Wait for the oldest write in flight; record its failure."""
        completion, data, offset = self._in_flight.popleft()
        try:
            completion.wait_for_complete_and_cb()
        except Exception:
            LOG.exception('Completion callback of an RBD write failed.')
            self._fail(offset, len(data), -errno.EIO)
        self._fail(offset, len(data), completion.get_return_value())

    def _wait_all(self) -> None:
        while self._in_flight:
            self._reap()

    def _raise_failure(self) -> None:
        if self._failure is None:
            return
        offset, length, ret = self._failure
        self._reported = True
        raise IOError(-ret, _('RBD write of %(len)d bytes at offset %(off)d '
                              'failed: %(err)s') % {
                                  'len': length, 'off': offset,
                                  'err': os.strerror(-ret)})

    def read(self, length: Optional[int] = -1) -> bytes:
        self._wait_all()
        self._raise_failure()
        size = self._image.size()
        if length is None or length < 0:
            length = size - self._pos
        length = max(0, min(length, size - self._pos))
        if not length:
            return b''
        data = self._image.read(self._pos, length)
        self._pos += len(data)
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET:
            self._pos = offset
        elif whence == os.SEEK_CUR:
            self._pos += offset
        elif whence == os.SEEK_END:
            self._pos = self._image.size() + offset
        else:
            raise ValueError(_('invalid whence %s') % whence)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def flush(self) -> None:
        self._wait_all()
        self._raise_failure()
        self._image.flush()

    def fileno(self) -> int:
        raise IOError(_('an RBD image has no file descriptor'))

    def close(self) -> None:
        if self._image is None:
            return
        try:
            self._wait_all()
            if self._failure is None:
                self._image.flush()
        finally:
            try:
                self._image.close()
            finally:
                self._image = None
                self._connection.__exit__(None, None, None)
        if not self._reported:
            self._raise_failure()

    def __enter__(self) -> ImageFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # Callers such as upstream's copy_volume_to_image drop the handle
        # without closing it.  The image must be closed before its
        # connection shuts down: librbd hangs closing an image whose
        # cluster handle is gone, which is what collecting both in any
        # order can do.
        try:
            self.close()
        except Exception:
            LOG.exception('RBD image file dropped unclosed.')


def _ignore(completion: Any) -> None:
    """A completion callback: the completion is checked when reaped."""


def _reaped(completion: Any, offset: int) -> Optional[tuple[int, int]]:
    """Wait for *completion*: None, or ``(offset, ret)`` if it failed."""
    completion.wait_for_complete_and_cb()
    ret = completion.get_return_value()
    return (offset, ret) if ret < 0 else None


class Images(object):
    """Image I/O on the RBD images of one pool.

    :param access: a :class:`cinder_forcedetach.ceph.cluster.Access`.
    :param execute: Cinder's ``execute`` (for qemu-img).
    """

    def __init__(self, access: cluster.Access, pool: str,
                 execute: Callable[..., Any]) -> None:
        self.access = access
        self.pool = pool
        self.execute = execute
        self._fsid: Optional[str] = None

    def connect(self, pool: Optional[str] = None
                ) -> contextlib.AbstractContextManager[tuple[Any, Any]]:
        return cluster.connect(self.access, pool or self.pool)

    def fsid(self) -> Optional[str]:
        if not self._fsid:
            with self.connect() as (client, _ioctx):
                self._fsid = client.get_fsid()
        return self._fsid

    def qemu_spec(self, name: str, pool: Optional[str] = None,
                  snapshot: Optional[str] = None) -> str:
        return qemu_rbd_spec(pool or self.pool, name, user=self.access.user,
                             conf=self.access.conf or None,
                             keyring=self.access.keyring, snapshot=snapshot)

    def open_file(self, name: str, read_only: bool = False,
                  depth: int = WRITE_DEPTH) -> ImageFile:
        """An :class:`ImageFile` on image *name* (closing it disconnects).

        *depth*: librbd writes kept in flight (see :class:`ImageFile`).
        """
        connection = self.connect()
        _client, ioctx = connection.__enter__()
        try:
            image = rbd.Image(ioctx, name, read_only=read_only)
        except BaseException:
            connection.__exit__(None, None, None)
            raise
        return ImageFile(connection, image, depth=depth)

    def same_cluster_location(self, context: cinder_context.RequestContext,
                              image_service: Any, image_id: str
                              ) -> Optional[tuple[str, ...]]:
        """``(pool, image, snap)`` of an image's ``rbd://`` location here."""
        try:
            direct_url, locations = image_service.get_location(context,
                                                               image_id)
        except (AttributeError, NotImplementedError, exception.NotFound):
            return None
        for url in [direct_url] + [loc.get('url') for loc in locations or []]:
            parsed = parse_rbd_location(url)
            if not parsed:
                continue
            if parsed[0] == self.fsid():
                return parsed[1:]
            LOG.debug('%s is in another Ceph cluster.', url)
        return None

    def read_head(self, location: tuple[str, ...]) -> bytes:
        """The first bytes of a same-cluster image, for the inspector."""
        pool, name, snap = location
        with self.connect(pool) as (_client, ioctx):
            with rbd.Image(ioctx, name, snapshot=snap,
                           read_only=True) as image:
                return image.read(0, min(image_gates.HEAD_BYTES, image.size()))

    def discard_all(self, name: str) -> None:
        """Deallocate every object of image *name*: it then reads zeros.

        What a reimage must not leave behind is old data in the image's
        holes; discarding whole objects is cheaper than writing zeros, and
        ``qemu-img convert`` can then skip the image's holes.  Snapshots
        keep their data (copy-on-write).
        """
        with self.connect() as (_client, ioctx):
            with rbd.Image(ioctx, name) as image:
                size = image.size()
                # librbd returns the length discarded as an int: at most
                # 2 GiB per call; WRITE_DEPTH calls in flight.
                in_flight: collections.deque[tuple[Any, int]] = (
                    collections.deque())
                failed = []
                for offset in range(0, size, units.Gi):
                    if len(in_flight) >= WRITE_DEPTH:
                        failed.append(_reaped(*in_flight.popleft()))
                    length = min(units.Gi, size - offset)
                    in_flight.append((image.aio_discard(
                        offset, length, _ignore), offset))
                while in_flight:
                    failed.append(_reaped(*in_flight.popleft()))
                errors = [f for f in failed if f]
                if errors:
                    offset, ret = errors[0]
                    raise IOError(-ret, _('RBD discard at offset %(off)d '
                                          'of %(name)s failed: %(err)s') % {
                                              'off': offset, 'name': name,
                                              'err': os.strerror(-ret)})

    def clone_into(self, location: tuple[str, ...], name: str, size_gb: int,
                   features: Optional[int]) -> None:
        """Image *name*: a clone of a raw same-cluster snapshot.

        The snapshot's head must pass the format inspector as raw and the
        image must fit *size_gb*.  A clone v2 (no protection) where the
        cluster allows it, else the snapshot is protected (clone v1).
        """
        pool, image_name, snap = location
        with self.connect() as (client, ioctx):
            src_ioctx = client.open_ioctx(pool)
            try:
                with rbd.Image(src_ioctx, image_name, snapshot=snap,
                               read_only=True) as src:
                    if src.size() > size_gb * units.Gi:
                        raise exception.ImageTooBig(
                            image_id=image_name,
                            reason=_('image is larger than the volume'))
                    image_gates.check_head(image_name, 'raw', src.read(
                        0, min(image_gates.HEAD_BYTES, src.size())))
                    features = (features or src.features()) | (
                        rbd.RBD_FEATURE_LAYERING)
                try:
                    rbd.RBD().clone(src_ioctx, image_name, snap, ioctx, name,
                                    features=features)
                except rbd.InvalidArgument:
                    with rbd.Image(src_ioctx, image_name) as parent:
                        if parent.is_protected_snap(snap):
                            raise
                        LOG.info('Cluster needs clone v1: protecting '
                                 '%s@%s.', image_name, snap)
                        parent.protect_snap(snap)
                    rbd.RBD().clone(src_ioctx, image_name, snap, ioctx, name,
                                    features=features)
            finally:
                src_ioctx.close()
            with rbd.Image(ioctx, name) as new:
                if new.size() < size_gb * units.Gi:
                    new.resize(size_gb * units.Gi)

    def reimage_by_clone(self, volume: objects.Volume,
                         location: tuple[str, ...], image_id: str,
                         features: Optional[int] = None,
                         flatten: bool = False) -> bool:
        """Make *volume* a copy-on-write clone of a same-cluster image.

        The clone is made beside the volume and swapped in by two renames;
        a crash between them is repaired by the next call.  Returns False
        (nothing changed) when the volume is open by a client or has
        snapshots, which an in-place write keeps, or when the clone fails.
        """
        name = volume.name
        tmp, old = name + REIMAGE_TMP_SUFFIX, name + REIMAGE_OLD_SUFFIX
        with self.connect() as (_client, ioctx):
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
                self._remove(ioctx, stale)
        try:
            self.clone_into(location, tmp, volume.size, features)
        except (rbd.Error, rados.Error,
                exception.VolumeBackendAPIException) as err:
            LOG.info('Cannot clone image %(img)s for volume %(vol)s '
                     '(%(err)s): writing it in place.',
                     {'img': image_id, 'vol': volume.id, 'err': err})
            return False
        with self.connect() as (_client, ioctx):
            if flatten:
                with rbd.Image(ioctx, tmp) as new:
                    new.flatten()
            rbd.RBD().rename(ioctx, name, old)
            rbd.RBD().rename(ioctx, tmp, name)
            try:
                rbd.RBD().remove(ioctx, old)
            except rbd.Error as err:
                LOG.warning('Old image %(old)s of volume %(vol)s not '
                            'removed (%(err)s); the next reimage removes '
                            'it.', {'old': old, 'vol': volume.id,
                                    'err': err})
        LOG.info('Volume %(vol)s is now a clone of image %(img)s '
                 '(%(pool)s/%(name)s@%(snap)s).',
                 {'vol': volume.id, 'img': image_id, 'pool': location[0],
                  'name': location[1], 'snap': location[2]})
        return True

    def remove_reimage_leftovers(self, name: str) -> None:
        """Remove what an interrupted reimage of image *name* left."""
        with self.connect() as (_client, ioctx):
            for suffix in (REIMAGE_TMP_SUFFIX, REIMAGE_OLD_SUFFIX):
                self._remove(ioctx, name + suffix)

    @staticmethod
    def _remove(ioctx: Any, name: str) -> None:
        try:
            rbd.RBD().remove(ioctx, name)
        except rbd.ImageNotFound:
            pass

    @staticmethod
    def _recover_reimage(ioctx: Any, name: str, old: str) -> None:
        """Put back a volume a crash left renamed to ``.reimage-old``."""
        try:
            rbd.Image(ioctx, name, read_only=True).close()
        except rbd.ImageNotFound:
            LOG.warning('RBD image %(name)s missing, %(old)s present: '
                        'an interrupted reimage; restoring it.',
                        {'name': name, 'old': old})
            rbd.RBD().rename(ioctx, old, name)

    def convert_from_cluster(self, volume: objects.Volume,
                             location: tuple[str, ...], image_id: str,
                             fmt: Optional[str], sparse: bool = True) -> bool:
        """qemu-img from the image's pool, once upstream's checks pass.

        Returns False when the image's head did not settle its format.
        """
        pool, name, snap = location
        source = self.qemu_spec(name, pool=pool, snapshot=snap)
        qfmt = image_gates.check_source(image_id, fmt, source,
                                        self.read_head(location), volume.size,
                                        execute=self.execute)
        if not qfmt:
            LOG.info('Image %s: its head does not settle its format; '
                     'fetching it instead.', image_id)
            return False
        if not sparse:
            self.discard_all(volume.name)
        self.execute('qemu-img', 'convert', '-n', '-f', qfmt, '-O', 'raw',
                     source, self.qemu_spec(volume.name))
        LOG.info('Image %(img)s written into volume %(vol)s by qemu-img '
                 'from %(pool)s/%(name)s.', {'img': image_id,
                                             'vol': volume.id,
                                             'pool': pool, 'name': name})
        return True
