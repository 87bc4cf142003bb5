"""Write an image straight onto a volume, without a temporary file.

Upstream drivers fetch the whole image into ``image_conversion_dir`` and
convert it from there.  Here ``qemu-img convert`` reads the image where it
lives (a ``file://`` or ``http(s)://`` location) and writes the volume, or,
for a raw image with no readable location, the image service's download
stream is written to the volume chunk by chunk.  The image's declared
format is always passed to qemu-img (never probed), images with a backing
or data file are refused, and an image larger than the volume is refused
before a single byte is written.
"""

import json
import urllib.parse

from cinder import exception
from cinder.i18n import _
from oslo_concurrency import processutils
from oslo_log import log as logging
from oslo_utils import units

LOG = logging.getLogger(__name__)

# Glance disk_format -> qemu-img format name.
QEMU_FORMATS = {'raw': 'raw', 'qcow2': 'qcow2', 'vmdk': 'vmdk',
                'vdi': 'vdi', 'vhd': 'vpc', 'vhdx': 'vhdx'}
READABLE_SCHEMES = ('file', 'http', 'https')


def readable_location(image_service, context, image_id):
    """The image's first location qemu-img can read directly, or None."""
    try:
        direct_url, locations = image_service.get_location(context, image_id)
    except (AttributeError, NotImplementedError, exception.NotFound):
        return None
    urls = [direct_url] + [loc.get('url') for loc in (locations or [])]
    for url in urls:
        if url and urllib.parse.urlparse(url).scheme in READABLE_SCHEMES:
            return url
    return None


def qemu_source(url):
    """A qemu-img source for a location URL."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == 'file':
        return urllib.parse.unquote(parsed.path)
    return url


def image_virtual_size(source, fmt, image_id, execute):
    """Virtual size in bytes, refusing backing and external data files."""
    out, _err = execute('qemu-img', 'info', '--output=json', '-f', fmt,
                        source)
    info = json.loads(out)
    if info.get('backing-filename') or (
            info.get('format-specific', {}).get('data', {}).get('data-file')):
        raise exception.ImageUnacceptable(
            image_id=image_id,
            reason=_('images with a backing or data file are refused'))
    return int(info['virtual-size'])


def check_fits(image_id, size_bytes, volume_size_gb):
    if size_bytes > volume_size_gb * units.Gi:
        raise exception.ImageTooBig(
            image_id=image_id,
            reason=_('image is %(img)d bytes, volume is %(vol)d GiB') % {
                'img': size_bytes, 'vol': volume_size_gb})


def stream_to_volume(context, image_service, image_id, volume_size_gb,
                     destination, open_destination, allowed_formats,
                     sparse=True,
                     execute=processutils.execute):
    """Write image *image_id* onto a volume.

    :param destination: the volume as qemu-img names it (a path, or e.g.
        ``json:{...}``), used when the image has a readable location.
    :param open_destination: a callable returning a writable binary file
        object on the volume, used to stream a raw image from the service.
    :returns: 'qemu-img' or 'stream', the path taken.
    """
    meta = image_service.show(context, image_id)
    disk_format = meta.get('disk_format') or 'raw'
    if disk_format not in allowed_formats or disk_format not in QEMU_FORMATS:
        raise exception.ImageUnacceptable(
            image_id=image_id,
            reason=_('disk format %s is not accepted') % disk_format)
    fmt = QEMU_FORMATS[disk_format]
    url = readable_location(image_service, context, image_id)
    if url:
        source = qemu_source(url)
        check_fits(image_id, image_virtual_size(source, fmt, image_id,
                                                execute), volume_size_gb)
        cmd = ['qemu-img', 'convert', '-n', '-f', fmt, '-O', 'raw']
        if not sparse:
            cmd += ['-S', '0']
        execute(*(cmd + [source, destination]))
        LOG.info('Image %(img)s written by qemu-img from its %(scheme)s '
                 'location.', {'img': image_id,
                               'scheme': urllib.parse.urlparse(url).scheme})
        return 'qemu-img'
    if fmt != 'raw':
        raise exception.ImageUnacceptable(
            image_id=image_id,
            reason=_('a %s image needs a file or http location to be '
                     'converted without a temporary copy') % disk_format)
    if meta.get('size'):
        check_fits(image_id, int(meta['size']), volume_size_gb)
    limit = volume_size_gb * units.Gi
    written = 0
    with open_destination() as volume_file:
        for chunk in image_service.download(context, image_id):
            written += len(chunk)
            if written > limit:
                raise exception.ImageTooBig(
                    image_id=image_id,
                    reason=_('download exceeded the volume size of %d GiB')
                    % volume_size_gb)
            volume_file.write(chunk)
        volume_file.flush()
    LOG.info('Image %(img)s streamed from the image service (%(n)d bytes).',
             {'img': image_id, 'n': written})
    return 'stream'
