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

"""Write an image onto a volume behind Cinder's own image gates.

Image data only ever comes from what the image service's ``download()``
reads: Glance's data, or the file of a ``file://`` location when, and only
when, upstream's ``download()`` would read that file itself
(``allowed_direct_url_schemes`` has ``file``; empty by default), or the
copy Cinder already fetched for this request; no location is ever handed to
qemu-img.  Glance's data call (glanceclient's ``images.data()``, which
Cinder's ``download()`` iterates) is a plain byte stream: it tells no
holes.  A local file does (``SEEK_DATA``/``SEEK_HOLE``): those two are read
by this module, their holes never read.

* A raw image of known size is streamed onto the volume without a temporary
  copy, but its first :data:`HEAD_BYTES` are held back until the format
  inspector of oslo.utils (the stream inspector Cinder's own was copied
  from) has seen them: content of another format (a qcow2, vmdk... declared
  raw) or failing the inspector's safety checks is refused before a byte
  reaches the volume, and so is an image larger than the volume (a stream
  longer than its declared size is cut off at the volume's end).  Where the
  volume reads zeros already (a new volume, or one the driver's ``discard``
  deallocated after that check), the image's zeros and holes are skipped,
  not written.
* Any other image goes through upstream's ``image_utils.fetch_to_raw`` into
  a temporary raw file in ``image_conversion_dir`` (format inspector,
  ``qemu-img info``, format mismatch, backing and data files, VMDK create
  types, virtual size, conversion and compression options); only then does
  ``qemu-img convert -n`` write it onto the volume.
"""

import errno
import io
import os
import urllib.parse

from cinder import exception
from cinder.i18n import _
from cinder.image import image_utils
from cinder.volume import configuration
from oslo_concurrency import processutils
from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import imageutils
from oslo_utils.imageutils import format_inspector
from oslo_utils import units

LOG = logging.getLogger(__name__)
CONF = cfg.CONF

image_opts = [
    cfg.ListOpt('forcedetach_image_formats',
                default=['raw', 'qcow2', 'vmdk', 'vdi', 'vhd', 'vhdx'],
                help='Image disk formats that copy_image_to_volume (and so '
                     'reimage and create from image) accepts, on top of '
                     'Cinder\'s own image checks, which every image passes: '
                     'the format inspector (content must match the declared '
                     'format), backing and data files, vmdk_allowed_types, '
                     'image_conversion_disable.'),
]

CONF.register_opts(image_opts, group=configuration.SHARED_CONF_GROUP)

#: Bytes of a raw stream inspected before anything is written.
HEAD_BYTES = units.Mi
#: What the inspector may find in a raw image (upstream's inspector and
#: ``qemu-img info`` call a partitioned disk, an ISO or LUKS raw too).
RAW_CONTENT = frozenset(['raw', 'gpt', 'iso', 'luks'])
#: A raw stream is written in blocks of this size...
BLOCK_BYTES = 4 * units.Mi
#: ... and, where the volume reads zeros already, all-zero grains of this
#: size are skipped, not written.
GRAIN_BYTES = 64 * units.Ki
_ZERO_BLOCK = bytes(BLOCK_BYTES)
_ZEROS = memoryview(_ZERO_BLOCK)


def unacceptable(image_id, reason):
    return exception.ImageUnacceptable(image_id=image_id, reason=reason)


def check_allowed(image_id, disk_format, allowed_formats):
    if disk_format not in (allowed_formats or ()):
        raise unacceptable(image_id, _('disk format %s is not accepted by '
                                       'forcedetach_image_formats')
                           % disk_format)


def check_fits(image_id, size_bytes, volume_size_gb):
    if size_bytes > volume_size_gb * units.Gi:
        raise exception.ImageTooBig(
            image_id=image_id,
            reason=_('image is %(img)d bytes, volume is %(vol)d GiB') % {
                'img': size_bytes, 'vol': volume_size_gb})


def check_head(image_id, disk_format, head):
    """Run the format inspector over the first bytes of an image.

    Refuses content of another format than *disk_format* and content the
    inspector finds unsafe.  Returns False when the bytes are too few for
    the inspector to finish (only possible for a non-raw *disk_format*).
    """
    wrapper = format_inspector.InspectWrapper(io.BytesIO(head))
    while wrapper.read(64 * units.Ki):
        pass
    wrapper.close()     # the end of the head counts as the end of the data
    expected = RAW_CONTENT if disk_format == 'raw' else {disk_format}
    try:
        found = wrapper.formats
        names = sorted(str(i) for i in found)
        if not set(names) <= expected or (disk_format != 'raw' and
                                          len(found) != 1):
            raise unacceptable(image_id, _(
                'the image is declared %(fmt)s but its data is %(found)s')
                % {'fmt': disk_format, 'found': '+'.join(names)})
        if not all(i.complete for i in found):
            return False
        for inspector in found:
            inspector.safety_check()
    except (format_inspector.ImageFormatError,
            format_inspector.SafetyCheckFailed) as err:
        raise unacceptable(image_id, _('format inspection failed: %s') % err)
    return True


def check_source(image_id, disk_format, source, head, volume_size_gb,
                 execute=processutils.execute):
    """Upstream's checks on an image qemu-img reads where it lives.

    *source* is what qemu-img opens (e.g. an ``rbd:`` spec), *head* its
    first bytes.  Returns the qemu-img format name, or None when the head
    did not settle the format (the caller then takes
    :func:`fetch_to_volume`).
    """
    if not check_head(image_id, disk_format, head):
        return None
    qfmt = image_utils.fixup_disk_format(disk_format)
    out, _err = execute(
        'env', 'LC_ALL=C', 'qemu-img', 'info', '-f', qfmt, '--output=json',
        source, prlimit=processutils.ProcessLimits(
            cpu_time=CONF.image_introspection_cpu_limit,
            address_space=CONF.image_introspection_address_space_limit *
            units.Gi))
    data = imageutils.QemuImgInfo(out, format='json')
    if data.backing_file:
        raise unacceptable(image_id, _('the image has a backing file'))
    image_utils.check_image_format(source, qfmt, image_id, data=data)
    image_utils.check_virtual_size(data.virtual_size, volume_size_gb,
                                   image_id)
    return qfmt


class _RawSink(object):
    """Where ``download()`` writes a raw image: its head, then the volume.

    Nothing reaches the volume (nor is *discard* called) before
    :func:`check_head` has passed the first :data:`HEAD_BYTES`.  Data goes
    out in blocks of :data:`BLOCK_BYTES`; when the volume reads zeros
    already (*sparse*: a new volume, or *discard* called once the head
    passed and returning True), all-zero :data:`GRAIN_BYTES` are skipped,
    and so are the holes a source tells (:meth:`zeros`).  Writes may be
    asynchronous (the RBD file): :meth:`finish` returns only once the
    volume's ``flush()`` did, which reports any write that failed.
    """

    def __init__(self, image_id, volume_size_gb, open_destination,
                 sparse=False, discard=None):
        self.image_id = image_id
        self.volume_size_gb = volume_size_gb
        self.open_destination = open_destination
        self.skip_zeros = sparse
        self.discard = discard
        self.pending = []           # received, not yet written
        self.pending_len = 0
        self.written = 0            # bytes received
        self.pos = 0                # volume offset of pending[0]
        self.at = 0                 # the volume's file position
        self.volume = None

    def _count(self, length):
        self.written += length
        if self.written > self.volume_size_gb * units.Gi:
            raise exception.ImageTooBig(
                image_id=self.image_id,
                reason=_('download exceeded the volume size of %d GiB')
                % self.volume_size_gb)

    def write(self, data):
        self._count(len(data))
        self.pending.append(bytes(data))
        self.pending_len += len(data)
        if self.volume is None:
            if self.pending_len < HEAD_BYTES:
                return
            self._open()
        if self.pending_len >= BLOCK_BYTES:
            self._drain(self.pending_len - self.pending_len % BLOCK_BYTES)

    def zeros(self, length):
        """The next *length* bytes of the image are zeros (a hole).

        Skipped (neither made nor written) once the head passed, where the
        volume reads zeros; else they go through :meth:`write`.
        """
        while length > 0 and (self.volume is None or not self.skip_zeros):
            n = min(length, BLOCK_BYTES)
            self.write(_ZERO_BLOCK[:n])
            length -= n
        if length > 0:
            self._count(length)
            if self.pending_len:
                self._drain(self.pending_len)
            self.pos += length

    def _open(self):
        check_head(self.image_id, 'raw', b''.join(self.pending))
        if not self.skip_zeros and self.discard is not None:
            self.skip_zeros = bool(self.discard())
        self.volume = self.open_destination()

    def _drain(self, end):
        """Write the first *end* pending bytes (whole blocks, or all)."""
        chunks, taken = [], 0
        while taken < end:
            chunk = self.pending.pop(0)
            if taken + len(chunk) > end:
                cut = end - taken
                self.pending.insert(0, chunk[cut:])
                chunk = chunk[:cut]
            chunks.append(chunk)
            taken += len(chunk)
        self.pending_len -= end
        if self.skip_zeros:
            self._write_runs(chunks)
        else:
            self._write_at(self.pos, chunks)
        self.pos += end

    def _write_runs(self, chunks):
        """Write the non-zero grains of *chunks* (from ``pos`` on).

        Chunk by chunk, without joining them first: adjacent non-zero
        grains make one write, the only copy of their bytes.
        """
        run_at, run_end, pieces = None, None, []
        off = self.pos
        for chunk in chunks:
            for start, stop in _runs(chunk, off):
                if run_end != off + start:
                    if pieces:
                        self._write_at(run_at, pieces)
                    run_at, pieces = off + start, []
                pieces.append(chunk if stop - start == len(chunk)
                              else memoryview(chunk)[start:stop])
                run_end = off + stop
            off += len(chunk)
        if pieces:
            self._write_at(run_at, pieces)

    def _write_at(self, offset, pieces):
        data = (pieces[0] if len(pieces) == 1 and
                isinstance(pieces[0], bytes) else b''.join(pieces))
        if self.at != offset:
            self.volume.seek(offset)
        self.volume.write(data)
        self.at = offset + len(data)

    def finish(self):
        if self.volume is None:
            self._open()
        self._drain(self.pending_len)
        self.volume.flush()

    def close(self):
        if self.volume is not None:
            self.volume.close()


def _zero(data, start, stop):
    return data.startswith(_ZEROS[:stop - start], start, stop)


def _runs(data, base):
    """``(start, stop)`` in *data* of its runs of non-zero grains.

    *base* is the volume offset of ``data[0]``: grains are the volume's
    :data:`GRAIN_BYTES`, blocks its :data:`BLOCK_BYTES`.  The zeros up to
    the end of a block are recognised at once (one memcmp) at the start of
    *data* and of each block, then grain by grain: every byte is compared
    at most twice.
    """
    run, off, end = None, 0, len(data)
    while off < end:
        at = base + off
        if off == 0 or at % BLOCK_BYTES == 0:
            block_end = min(off + BLOCK_BYTES - at % BLOCK_BYTES, end)
            if _zero(data, off, block_end):
                if run is not None:
                    yield run, off
                    run = None
                off = block_end
                continue
        grain_end = min(off + GRAIN_BYTES - at % GRAIN_BYTES, end)
        if _zero(data, off, grain_end):
            if run is not None:
                yield run, off
                run = None
        elif run is None:
            run = off
        off = grain_end
    if run is not None:
        yield run, end


def local_source(context, image_service, image_id):
    """The local file the image service's data would come from, or None.

    The copy Cinder already fetched for this request (create from image),
    else the first ``file://`` location when upstream's ``download()``
    would read it itself: ``allowed_direct_url_schemes`` has ``file``
    (upstream's rule, in upstream's order of locations).
    """
    temp_images = getattr(image_service, 'temp_images', None)
    fetched = temp_images and temp_images.get(context, image_id)
    if fetched:
        return fetched
    if 'file' not in (CONF.allowed_direct_url_schemes or ()):
        return None
    try:
        direct_url, locations = image_service.get_location(context, image_id)
    except (AttributeError, NotImplementedError, exception.NotFound):
        return None
    for url in [direct_url] + [loc.get('url') for loc in locations or []]:
        if url is None:
            continue
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme == 'file':
            return parsed.path
    return None


def _seek(fd, pos, whence, size):
    """``lseek(SEEK_DATA/SEEK_HOLE)``; *size* where nothing follows."""
    try:
        return min(os.lseek(fd, pos, whence), size)
    except OSError as err:
        if err.errno == errno.ENXIO:        # no data (or EOF) after pos
            return size
        if err.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return pos if whence == os.SEEK_DATA else size
        raise


def copy_file(path, sink):
    """Feed *sink* a local file: its data read, its holes told as holes."""
    with open(path, 'rb') as src:
        fd = src.fileno()
        size = os.fstat(fd).st_size
        pos = 0
        while pos < size:
            data = _seek(fd, pos, os.SEEK_DATA, size)
            if data > pos:
                sink.zeros(data - pos)
                pos = data
            hole = _seek(fd, pos, os.SEEK_HOLE, size)
            while pos < hole:
                chunk = os.pread(fd, min(BLOCK_BYTES, hole - pos), pos)
                if not chunk:
                    return
                sink.write(chunk)
                pos += len(chunk)


def stream_raw(context, image_service, image_id, volume_size_gb,
               open_destination, sparse=False, discard=None):
    """Stream a raw image onto the volume, its head inspected first.

    A local file (:func:`local_source`) is read with its holes; anything
    else is the image service's ``download()`` (Glance's data: every byte).
    *sparse* and *discard*: see :class:`_RawSink`.
    """
    sink = _RawSink(image_id, volume_size_gb, open_destination,
                    sparse=sparse, discard=discard)
    path = local_source(context, image_service, image_id)
    try:
        if path:
            copy_file(path, sink)
        else:
            image_service.download(context, image_id, sink)
        sink.finish()
    finally:
        sink.close()
    LOG.info('Image %(img)s streamed onto the volume (%(n)d bytes%(from)s).',
             {'img': image_id, 'n': sink.written,
              'from': ' from %s' % path if path else ''})


def fetch_to_volume(context, image_service, image_id, volume_size_gb,
                    destination, sparse=True, discard=None, blocksize='1M',
                    execute=processutils.execute):
    """Upstream's fetch and checks into a temporary file, then the volume.

    :param discard: a callable that deallocates the whole volume and
        returns True, for a non-sparse write (reimage) to skip the holes.
    """
    with image_utils.temporary_file(prefix='forcedetach_%s_' % image_id,
                                    suffix='.raw') as tmp:
        try:
            image_utils.fetch_to_raw(context, image_service, image_id, tmp,
                                     blocksize, size=volume_size_gb,
                                     run_as_root=False)
        except (exception.ImageUnacceptable, exception.ImageTooBig):
            raise
        except exception.Invalid as err:
            # qemu_img_info's "Image/Volume failed safety check"
            raise unacceptable(image_id, _(
                "Cinder's format inspector found the image unsafe (a "
                "backing or data file, VMDK extents, unknown features): "
                "%s") % err)
        if not sparse and discard is not None and discard():
            sparse = True
        cmd = ['qemu-img', 'convert', '-n', '-f', 'raw', '-O', 'raw']
        if not sparse:
            cmd += ['-S', '0']
        execute(*(cmd + [tmp, destination]))
    LOG.info('Image %s written onto the volume by qemu-img.', image_id)


def copy_to_volume(context, image_service, image_id, volume_size_gb,
                   destination, open_destination, allowed_formats,
                   sparse=True, discard=None, blocksize='1M',
                   execute=processutils.execute):
    """Write image *image_id* onto a volume; returns the path taken.

    :param destination: the volume as qemu-img names it (a path, or e.g.
        an ``rbd:`` spec).
    :param open_destination: a callable returning a writable binary file
        object on the volume, for a raw stream.
    :param sparse: the volume reads zeros (a new volume): zeros need not
        be written.
    :param discard: a callable that deallocates the whole volume (it then
        reads zeros) and returns True; called only once the image passed
        its checks, and only when *sparse* is False.
    :returns: 'stream' or 'qemu-img'.
    """
    meta = image_service.show(context, image_id)
    disk_format = meta.get('disk_format') or 'raw'
    check_allowed(image_id, disk_format, allowed_formats)
    if (disk_format == 'raw' and meta.get('size') and
            meta.get('container_format') != 'compressed'):
        # (an unknown size could only be found too large mid-stream)
        check_fits(image_id, int(meta['size']), volume_size_gb)
        stream_raw(context, image_service, image_id, volume_size_gb,
                   open_destination, sparse=sparse, discard=discard)
        return 'stream'
    fetch_to_volume(context, image_service, image_id, volume_size_gb,
                    destination, sparse=sparse, discard=discard,
                    blocksize=blocksize, execute=execute)
    return 'qemu-img'
