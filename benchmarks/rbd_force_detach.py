#!/usr/bin/env python3
"""RBD force-detach and reimage: ours, upstream Cinder and the limit.

Everything runs in one process against one real single-node Ceph cluster
(``tools/ceph-dev.sh``, brought up in a private directory unless
``--ceph-dir`` names a running one), with two drivers configured on it:
ours (``cinder_forcedetach.drivers.rbd.RBDDriver``) and Cinder 29's own
``cinder.volume.drivers.rbd.RBDDriver`` ("upstream").

1. Force-detach of a volume a live librbd client keeps writing.

   The volume and its attachment (the host's connector and the driver's
   ``initialize_connection`` result) are rows of a SQLite Cinder database,
   and Cinder's coordinator runs, as in cinder-volume.  The client is a
   subprocess (``tests.support.ceph.WRITER``) that opens the image
   from that connection data, as os-brick would, and writes one numbered
   4 KiB block every 5 ms.  Each round then runs what Cinder's
   ``os-force_detach`` runs: the driver's ``terminate_connection(volume,
   connector, force=False)``, then what the manager's ``detach_volume``
   runs: the driver's ``remove_export(context, volume)`` and
   ``volume.finish_detach(attachment_id)``, after which the volume is
   ``available``.  Then a new client (a new attachment) opens the image
   and writes, and the old client is watched for a bounded window
   (``--window``, 10 s by default).  Reported per driver:

   - detach call: how long those three calls took;
   - new writer: from the start of the detach until the new client has
     written and flushed;
   - old writer: its writes that completed after ``available``, how long
     it went on (or "still writing at the end of the window"), and the
     error it saw;
   - landed: of the blocks the old client tried to write after
     ``available``, those read back from the cluster afterwards.

   Upstream's terminate_connection and remove_export are no-ops, so its
   old client goes on writing.  Ours fences it (``osd blocklist`` plus
   lock break, in ``fence_clients``): nothing may land after
   ``available``.  Goal: ours, fence to new writer < 1 s (median).

   Anchors from elsewhere, quoted and never computed into a ratio:

   - Kubernetes' attach/detach controller force-detaches a volume from an
     unhealthy node only after ``ReconcilerMaxWaitForUnmountDuration`` =
     6 min (``DefaultTimerConfig`` in kubernetes/kubernetes
     ``pkg/controller/volume/attachdetach/attach_detach_controller.go``);
     that detach does not fence the old node's client either.
   - ceph-csi's node stage of an RBD image that still has a watcher
     (``waitForrbdImage`` in ceph/ceph-csi ``internal/rbd/rbd_attach.go``;
     ``rbdImageWatcherInitDelay`` 1 s, ``rbdImageWatcherFactor`` 1.4,
     ``rbdImageWatcherSteps`` 10 in ``internal/rbd/rbd_util.go``) checks
     ``rbd status`` 10 times with sleeps growing from 1 s by x1.4 (about
     49 s of sleep; the source comment says "30 seconds timeout"), then
     fails "rbd image ... is still being used".  It waits for a stale
     watcher to go; it fences nothing.

2. Reimage of a raw image of ``--sizes`` GiB (sparse: a 1 MiB extent of
   data every 16 MiB) onto an existing volume full of old data, as
   Cinder's manager calls ``copy_image_to_volume(..., disable_sparse=True)``
   for ``os-reimage``.  The image service is Cinder's own
   ``GlanceImageService`` (its ``download()`` code unchanged) over a stub
   Glance client serving the image file in glanceclient's 1 MiB chunks;
   the image's Glance location is its ``file://`` path (a filesystem
   store), plus a copy in the cluster's images pool (``rbd://``).

   - limit: ``qemu-img convert -n -f raw -O raw <image file>
     rbd:<pool>/<volume>:id=...:conf=...:keyring=<path>`` -- the same
     source onto the same kind of target, with qemu-img's own zero
     detection (holes become write-zeroes requests);
   - the same with ``-S 0``: every byte written, zeros too, as our stream
     does (``--full-write-sizes``);
   - ours, clone: the ``rbd://`` image; the volume becomes a copy-on-write
     clone of its snapshot;
   - ours, stream: the image service's ``download()`` into our raw sink
     (format inspector on the first 1 MiB, then librbd asynchronous
     writes, 8 in flight, zeros skipped on the discarded volume; no
     temporary file).  ``allowed_direct_url_schemes`` is empty, so
     download() asks Glance, never reads the ``file://`` location: every
     byte, zeros included, crosses the image service (Glance's data call
     tells no holes);
   - ours, stream with ``allowed_direct_url_schemes = file``: where
     upstream's download() would read the ``file://`` location itself,
     our stream reads that file with its holes (``SEEK_DATA``/
     ``SEEK_HOLE``): only the data extents are read, nothing comes from
     Glance (``--file-scheme-sizes``);
   - upstream: Cinder's RBD ``copy_image_to_volume`` (``fetch_to_raw``
     into a temporary file, then ``qemu-img convert -S 0`` into the
     volume);
   - qemu-img onto a local sparse file, for scale only (another target).

   Each result is read back (every data extent, one block in every hole:
   zeros, no old data), the path taken is checked (clone: the volume has
   a parent; stream: download() wrote into our sink; stream of the file:
   download() not called, nothing from Glance; upstream: download() into
   a file), and limit/way and upstream/way are printed: both operands
   measured in this run.  Goals: stream >= 0.9 of the limit; clone of
   10 GiB < 1 s and >= 10x faster than upstream.

   Where download() served data, the time the image service spent
   producing it (reading the image file into the chunks download()
   iterates) is given too: the part of the way's time no consumer of
   Glance's byte stream can save.

   Warm: the whole image file, holes too, is read once right before each
   way is timed, so it is in the page cache.  With ``--cold`` every way
   is measured a second time with a cold cache: ``sync`` and ``echo 3 >
   /proc/sys/vm/drop_caches`` right before each way is timed (the
   limit's and ours alike; root only).

No key is printed: the keyring is only ever passed as a file path.

Usage: .venv/bin/python benchmarks/rbd_force_detach.py [--sizes 1,10]
           [--rounds 5] [--window 10] [--file-scheme-sizes 1]
           [--full-write-sizes 1] [--cold] [--ceph-dir DIR]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

from cinder import context as cinder_context  # noqa: E402
from cinder import coordination  # noqa: E402
from cinder.db import migration  # noqa: E402
from cinder import objects  # noqa: E402
import cinder.privsep  # noqa: E402
from cinder.volume.drivers import rbd as upstream_rbd  # noqa: E402
from glanceclient.common import http as glance_http  # noqa: E402
from oslo_concurrency import lockutils  # noqa: E402
from oslo_config import cfg  # noqa: E402
from oslo_utils import units  # noqa: E402
import rbd  # noqa: E402

from cinder_forcedetach.drivers import rbd as rbd_driver  # noqa: E402
from devbox import ceph_dev  # noqa: E402
from tests import fakes  # noqa: E402
from tests.support import ceph  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTENT = units.Mi
STRIDE = 16 * units.Mi
BLOCK = ceph.BLOCK
WRITER_BASE = 16            # the old writer's first block (new one: 0)
WRITER_INTERVAL = 0.005
CONF = cfg.CONF
# What os-force_detach hands the driver: the detached host's connector.
CONNECTOR = {'host': 'localhost', 'ip': '127.0.0.1', 'platform': 'x86_64',
             'os_type': 'linux', 'multipath': False}


def median(values):
    return statistics.median(values) if values else float('nan')


def read_image(cluster, pool, name, ranges):
    """The bytes of *ranges* ``[(offset, length)]`` of an image."""
    client = cluster.connect()
    try:
        with client.open_ioctx(pool) as ioctx:
            with rbd.Image(ioctx, name, read_only=True) as image:
                return [image.read(off, length) for off, length in ranges]
    finally:
        client.shutdown()


# -- reimage ------------------------------------------------------------------


def extent(i):
    return (b'extent %08d ' % i).ljust(4096, b'#') * (EXTENT // 4096)


def make_images(cluster, images, workdir, size_gb):
    """The same sparse raw image as a local file and as a Ceph image."""
    size = size_gb * units.Gi
    count = size // STRIDE
    path = os.path.join(workdir, 'image-%dg.raw' % size_gb)
    with open(path, 'wb') as f:
        f.truncate(size)
        for i in range(count):
            f.seek(i * STRIDE)
            f.write(extent(i))
    name = 'bench-image-%dg-%s' % (size_gb, uuid.uuid4().hex[:8])
    client = cluster.connect()
    try:
        with client.open_ioctx(cluster.images_pool) as ioctx:
            rbd.RBD().create(ioctx, name, size)
            with rbd.Image(ioctx, name) as image:
                for i in range(count):
                    image.write(extent(i), i * STRIDE)
                image.create_snap('snap')
    finally:
        client.shutdown()
    file_id, rbd_id = str(uuid.uuid4()), str(uuid.uuid4())
    images.add(file_id, path=path, size=size, url='file://' + path)
    images.add(rbd_id, path=path, size=size, url='rbd://%s/%s/%s/snap' % (
        cluster.fsid, cluster.images_pool, name))
    return file_id, rbd_id, name, path


def old_volume(cluster, ctx, ours, size_gb):
    """A new volume with old data in every hole of the image to come."""
    # a row of the database: the driver records a reimage in progress in
    # the volume's admin metadata
    vol = objects.Volume(
        ctx, size=size_gb, host='bench@rbd#rbd', status='available',
        attach_status='detached', display_name='bench-reimage',
        volume_type_id=objects.VolumeType.get_by_name_or_id(
            ctx, '__DEFAULT__').id)
    vol.create()
    ours.create_volume(vol)
    client = cluster.connect()
    try:
        with client.open_ioctx(cluster.pool) as ioctx:
            with rbd.Image(ioctx, vol.name) as image:
                for i in range(size_gb * units.Gi // STRIDE):
                    image.write(b'OLD!' * 1024, i * STRIDE + STRIDE // 2)
    finally:
        client.shutdown()
    return vol


#: What a run found wrong (the checks, not the figures): exit status 1.
FAILED = []


def check_content(read, size_gb):
    """'verified', or what is wrong; *read(offset, length)* reads it."""
    for i in range(size_gb * units.Gi // STRIDE):
        if read(i * STRIDE, EXTENT) != extent(i):
            return 'extent %d differs' % i
        if read(i * STRIDE + STRIDE // 2, 4096) != b'\0' * 4096:
            return 'old data left in hole %d' % i
    return 'verified'


def verify(cluster, vol, size_gb):
    client = cluster.connect()
    try:
        with client.open_ioctx(cluster.pool) as ioctx:
            with rbd.Image(ioctx, vol.name, read_only=True) as image:
                return check_content(image.read, size_gb)
    finally:
        client.shutdown()


def has_parent(cluster, vol):
    client = cluster.connect()
    try:
        with client.open_ioctx(cluster.pool) as ioctx:
            with rbd.Image(ioctx, vol.name, read_only=True) as image:
                try:
                    image.parent_info()
                    return True
                except rbd.ImageNotFound:
                    return False
    finally:
        client.shutdown()


def delete(driver, vol):
    try:
        driver.delete_volume(vol)
    except Exception as err:
        print('  (cleanup of %s: %s)' % (vol.name, err))


def qemu_img(src, dst, *options):
    subprocess.run(['qemu-img', 'convert', '-n', '-f', 'raw', '-O', 'raw'] +
                   list(options) + [src, dst], check=True,
                   capture_output=True)


def drop_caches():
    """A cold page cache: dirty pages written, then every clean one gone."""
    os.sync()
    with open('/proc/sys/vm/drop_caches', 'w') as f:
        f.write('3\n')


def warm_cache(path):
    """A warm page cache: every page of *path*, holes too, read once."""
    with open(path, 'rb') as f:
        while f.read(4 * units.Mi):
            pass


def prepare_cache(path, cold):
    if cold:
        drop_caches()
    else:
        warm_cache(path)


class ImageService(fakes.FakeImageService):
    """The benchmark's image service: also times its own data.

    ``serving`` adds up the time spent producing the chunks download()
    iterates (reading the image file), so that a stream's time splits into
    the image service's part and the rest, measured in the same run under
    the same conditions.
    """

    serving = 0.0

    def chunks(self, image_id):
        source = super(ImageService, self).chunks(image_id)
        while True:
            t0 = time.monotonic()
            try:
                chunk = next(source)
            except StopIteration:
                return
            finally:
                self.serving += time.monotonic() - t0
            yield chunk


def bench_reimage(cluster, ctx, ours, upstream, workdir, size_gb,
                  file_scheme, full_write, modes=('warm',)):
    """{mode: {way: (seconds, result, image service's seconds)}}.

    For one image size.  *modes*: 'warm' (:func:`warm_cache` right before
    each way is timed) and/or 'cold' (:func:`drop_caches` instead).
    """
    images = ImageService(glance_download=True,
                          chunk_size=glance_http.CHUNKSIZE)
    file_id, rbd_id, name, path = make_images(cluster, images, workdir,
                                              size_gb)
    ways = [('limit', None, file_id)]
    if full_write:
        ways.append(('limit-full', None, file_id))
    ways += [('clone', ours, rbd_id), ('stream', ours, file_id)]
    if file_scheme:
        ways.append(('stream-file', ours, file_id))
    ways.append(('upstream', upstream, file_id))
    results = {}
    for mode in modes:
        results[mode] = run_ways(cluster, ctx, ours, images, ways, path,
                                 workdir, size_gb, mode == 'cold')

    os.unlink(path)
    client = cluster.connect()
    try:
        with client.open_ioctx(cluster.images_pool) as ioctx:
            with rbd.Image(ioctx, name) as image:
                image.remove_snap('snap')
            rbd.RBD().remove(ioctx, name)
    except rbd.Error as err:
        print('  (cleanup of image %s: %s)' % (name, err))
    finally:
        client.shutdown()
    return results


def run_ways(cluster, ctx, ours, images, ways, path, workdir, size_gb, cold):
    """{way: (seconds, result, seconds in the image service)}.

    Each way once, then the local file.
    """
    results = {}
    for way, driver, image_id in ways:
        vol = old_volume(cluster, ctx, ours, size_gb)
        del images.downloads[:]
        images.served = 0
        images.serving = 0.0
        if way == 'stream-file':
            CONF.set_override('allowed_direct_url_schemes', ['file'])
        prepare_cache(path, cold)
        t0 = time.monotonic()
        try:
            if way == 'limit':
                qemu_img(path, ours.image_destination(vol))
            elif way == 'limit-full':
                qemu_img(path, ours.image_destination(vol), '-S', '0')
            else:
                driver.copy_image_to_volume(ctx, vol, images, image_id,
                                            disable_sparse=True)
            elapsed = time.monotonic() - t0
        finally:
            CONF.clear_override('allowed_direct_url_schemes')
        result = verify(cluster, vol, size_gb)
        if result != 'verified':
            FAILED.append('reimage %d GiB by %s (%s): %s' % (
                size_gb, way, 'cold' if cold else 'warm', result))
        path_taken = path_check(way, cluster, vol, images, size_gb)
        if path_taken:
            result += '; ' + path_taken
        if images.served:
            result += '; image service: %.2f s of it' % images.serving
        results[way] = (elapsed, result, images.serving)
        delete(ours, vol)

    # qemu-img onto a local sparse file: the same source, another target
    target = os.path.join(workdir, 'target-%dg.raw' % size_gb)
    with open(target, 'wb') as f:
        f.truncate(size_gb * units.Gi)
    prepare_cache(path, cold)
    t0 = time.monotonic()
    qemu_img(path, target)
    elapsed = time.monotonic() - t0
    with open(target, 'rb') as f:
        results['file'] = (elapsed, check_content(
            lambda off, length: os.pread(f.fileno(), length, off), size_gb),
            0.0)
    os.unlink(target)
    return results


def path_check(way, cluster, vol, images, size_gb):
    """'' when *way* took the path it names, else what it did instead."""
    sinks = [sink for _id, sink in images.downloads]
    parent = has_parent(cluster, vol)
    expected = {
        'limit': (False, [], 0),
        'limit-full': (False, [], 0),
        'clone': (True, [], 0),
        'stream': (False, ['_RawSink'], size_gb * units.Gi),
        'stream-file': (False, [], 0),      # the file read by the stream
        'upstream': (False, ['BufferedWriter'], size_gb * units.Gi),
    }[way]
    if (parent, sinks, images.served) == expected:
        return ''
    return 'PATH NOT AS NAMED: parent=%s, download() into %s, %d bytes ' \
           'from Glance' % (parent, sinks, images.served)


# -- force-detach -----------------------------------------------------------


def new_writer(cluster, vol):
    client = cluster.connect()
    try:
        with client.open_ioctx(cluster.pool) as ioctx:
            with rbd.Image(ioctx, vol.name) as image:
                image.write(b'N' * BLOCK, 0)
                image.flush()
    finally:
        client.shutdown()


def attached_volume(ctx, driver):
    """A volume row attached to CONNECTOR's host, as Cinder has it."""
    vol = objects.Volume(
        ctx, size=1, host='bench@rbd#rbd',
        status='in-use', attach_status='attached', display_name='bench',
        volume_type_id=objects.VolumeType.get_by_name_or_id(
            ctx, '__DEFAULT__').id)
    vol.create()
    info = driver.initialize_connection(vol, CONNECTOR)
    att = objects.VolumeAttachment(
        ctx, volume_id=vol.id, attach_status='attached',
        attached_host=CONNECTOR['host'], connector=CONNECTOR,
        attach_mode='rw')
    att.create()
    att.connection_info = info      # save() stores it as JSON
    att.save()
    return vol, att, info['data']


def detach_round(cluster, ctx, driver, ours, window):
    """One force-detach of a volume a live client writes; a result dict."""
    vol, att, info = attached_volume(ctx, driver)
    ours.create_volume(vol)
    writer = ceph.Writer(
        cluster, info, 'bench-host', tag='W', base=WRITER_BASE,
        count=units.Gi // BLOCK - WRITER_BASE - 1,
        interval=WRITER_INTERVAL, mount_timeout=30)
    try:
        writer.wait_oks(5)
        t0 = time.monotonic()
        # what os-force_detach runs: the manager's terminate_connection,
        # then its detach_volume (remove_export, finish_detach)
        driver.terminate_connection(vol, CONNECTOR, force=False)
        driver.remove_export(ctx, vol)
        vol.finish_detach(att.id)
        t_avail, wall_avail = time.monotonic(), time.time()
        assert vol.status == 'available', vol.status
        new_writer(cluster, vol)
        t_new = time.monotonic()
        while (time.monotonic() < t_avail + window and
               writer.proc.poll() is None):
            writer.poll(0.1)
        writer.poll(0.1)
        running = writer.proc.poll() is None
    finally:
        writer.stop()
    oks = writer.oks()
    before = [seq for seq, t in oks if t <= wall_avail]
    after = [(seq, t) for seq, t in oks if t > wall_avail]
    tried = [seq for seq, _t in oks] + [e[0] for e in writer.errs()]
    # Every block the writer may have sent after 'available' (plus one:
    # a write in flight when it was killed), read back from the cluster.
    first = max(before) + 1 if before else 0
    last = max(tried + [first]) + 1
    if running:
        # a killed, unfenced client still holds the image: fence it for
        # the cleanup (after everything was measured)
        ours.fence_clients(vol, [None], [])
    data = read_image(cluster, cluster.pool, vol.name, [
        ((WRITER_BASE + seq) * BLOCK, BLOCK) for seq in range(first,
                                                              last + 1)])
    landed = sum(1 for seq, got in zip(range(first, last + 1), data)
                 if got == ceph.block_for('W', seq))
    errs = writer.errs()
    ours.lift_fence(vol)
    delete(ours, vol)
    return {
        'detach': t_avail - t0, 'new_writer': t_new - t0,
        'writes_after': len(after), 'landed': landed,
        'last_after': (max(t for _s, t in after) - wall_avail
                       if after else None),
        'running': running,
        'error': ('%s (errno %s)' % (errs[0][2], errs[0][1])
                  if errs else 'none'),
    }


def bench_detach(cluster, ctx, ours, upstream, rounds, window):
    results = {'ours': [], 'upstream': []}
    for _ in range(rounds):
        for name, driver in (('ours', ours), ('upstream', upstream)):
            results[name].append(detach_round(cluster, ctx, driver, ours,
                                              window))
    return results


# -- output ------------------------------------------------------------------


def kib(blocks):
    return '%d KiB' % (blocks * BLOCK // units.Ki)


def print_detach(results, window):
    print('\nForce-detach of a volume a live librbd client writes (a 4 KiB '
          'block every %d ms), %d rounds; old writer watched for %.0f s '
          'after "available":' % (WRITER_INTERVAL * 1000,
                                  len(results['ours']), window))
    fmt = '  %-9s %-16s %-16s %-21s %-16s %s'
    print(fmt % ('driver', 'detach call', 'new writer', 'old writer\'s writes',
                 'landed (read', 'old writer'))
    print(fmt % ('', 'median (max)', 'median (max)', 'after "available"',
                 'back), max', ''))
    for name in ('ours', 'upstream'):
        rs = results[name]
        detach = [r['detach'] for r in rs]
        new = [r['new_writer'] for r in rs]
        after = [r['writes_after'] for r in rs]
        landed = [r['landed'] for r in rs]
        running = sum(r['running'] for r in rs)
        if running:
            state = 'still writing at the end of the %.0f s window (%d of ' \
                    '%d rounds)' % (window, running, len(rs))
        else:
            lasts = [r['last_after'] for r in rs if r['last_after']]
            state = 'stopped; error seen: %s' % ', '.join(
                sorted({r['error'] for r in rs}))
            if lasts:
                state += '; last write %.2f s after "available"' % max(lasts)
        print(fmt % (name, '%.3f (%.3f) s' % (median(detach), max(detach)),
                     '%.3f (%.3f) s' % (median(new), max(new)),
                     'median %d (%s)' % (median(after),
                                         kib(median(after))),
                     '%d (%s)' % (max(landed), kib(max(landed))), state))
    ours_new = median([r['new_writer'] for r in results['ours']])
    ours_landed = max(r['landed'] for r in results['ours'])
    print('  goal: ours, fence to new writer < 1 s median: %s (%.3f s); '
          'nothing lands after "available": %s (%d blocks)' % (
              'met' if ours_new < 1 else 'NOT MET', ours_new,
              'met' if ours_landed == 0 else 'NOT MET', ours_landed))
    if ours_landed:
        FAILED.append('ours: %d blocks of the old writer landed after '
                      '"available"' % ours_landed)
    print('  upstream\'s new writer takes the exclusive lock by request '
          'while the old client still runs: both write the same image.')
    print('  Anchors (quoted, not measured here): Kubernetes force-detaches '
          'from an unhealthy node after ReconcilerMaxWaitForUnmountDuration '
          '= 6 min (kubernetes pkg/controller/volume/attachdetach/'
          'attach_detach_controller.go), without fencing; ceph-csi waits '
          'for a stale watcher with 10 rbd-status checks and sleeps from '
          '1 s growing x1.4 (ceph-csi internal/rbd/rbd_attach.go, '
          'rbd_util.go), then fails; neither fences the old client.')


LABELS = [
    ('limit', 'qemu-img convert -> RBD volume (the limit)'),
    ('limit-full', 'qemu-img convert -S 0 -> RBD (every byte written)'),
    ('clone', 'ours: clone of the rbd:// image'),
    ('stream', 'ours: stream from download() (Glance chunks)'),
    ('stream-file', 'ours: stream of the file:// location (holes)'),
    ('upstream', 'upstream RBD copy_image_to_volume'),
    ('file', 'qemu-img convert -> local file (other target)'),
]


def print_reimage(size_gb, results):
    data = size_gb * units.Gi // STRIDE * EXTENT // units.Mi
    modes = list(results)
    print('\nReimage, %d GiB raw image (%d MiB of data, the rest holes) onto '
          'a volume full of old data; %s:' % (size_gb, data, ', '.join(
              {'warm': 'warm (the image file read once before each way)',
               'cold': 'cold (sync + drop_caches before each way)'}[m]
              for m in modes)))
    fmt = '  %-48s' + ' %8s %-9s %-9s' * len(modes) + ' %s'
    print(fmt % tuple(['way'] + [h for m in modes for h in (
        '%s s' % m, 'limit/way', 'upstream/')] + ['result']))
    print(fmt % tuple([''] + ['', '', 'way'] * len(modes) + ['']))
    for way, label in LABELS:
        if way not in results[modes[0]]:
            continue
        row = [label]
        for mode in modes:
            r = results[mode]
            seconds = r[way][0]
            row += ['%.2f' % seconds,
                    '%.2fx' % (r['limit'][0] / seconds)
                    if way != 'file' else '-',
                    '%.1fx' % (r['upstream'][0] / seconds)]
        row.append(' | '.join(results[m][way][1] for m in modes))
        print(fmt % tuple(row))
    for mode in modes:
        r = results[mode]
        stream = r['limit'][0] / r['stream'][0]
        clone = r['clone'][0]
        print('  goals (%s): stream >= 0.9 of the limit: %s (%.2f); clone '
              '%s 1 s (%.2f s); clone >= 10x upstream: %s (%.1fx); the '
              'stream spent %.2f s in the image service' % (
                  mode, 'met' if stream >= 0.9 else 'NOT MET', stream,
                  '<' if clone < 1 else 'NOT <', clone,
                  'met' if r['upstream'][0] / clone >= 10 else 'NOT MET',
                  r['upstream'][0] / clone,
                  r['stream'][2]))


# -- setup --------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--sizes', default='1,10',
                        help='image sizes in GiB (default 1,10)')
    parser.add_argument('--rounds', type=int, default=5,
                        help='force-detach rounds per driver (default 5)')
    parser.add_argument('--window', type=float, default=10.0,
                        help='seconds the old writer is watched after '
                             '"available" (default 10)')
    parser.add_argument('--file-scheme-sizes', default='1',
                        help='sizes (GiB) also streamed with allowed_direct'
                             '_url_schemes = file (default 1: download() '
                             'then copies in 64 KiB writes, slow)')
    parser.add_argument('--full-write-sizes', default='1',
                        help='sizes (GiB) also written by qemu-img -S 0 '
                             '(default 1)')
    parser.add_argument('--cold', action='store_true',
                        help='measure every reimage way a second time with '
                             'a cold page cache (sync and echo 3 > '
                             '/proc/sys/vm/drop_caches before each way; '
                             'needs root)')
    parser.add_argument('--ceph-dir', default=None,
                        help='use the running tools/ceph-dev.sh cluster of '
                             'this directory')
    args = parser.parse_args()
    sizes, file_scheme, full_write = (
        [int(s) for s in value.split(',') if s]
        for value in (args.sizes, args.file_scheme_sizes,
                      args.full_write_sizes))

    objects.register_all()
    workdir = tempfile.mkdtemp(prefix='fd-rbd-bench-')
    CONF([], project='cinder', default_config_files=[])
    lockutils.set_defaults(workdir)
    # We are root: upstream's privileged calls (qemu-img info, convert) run
    # in this process instead of a privsep daemon started through sudo.
    cinder.privsep.sys_admin_pctxt.set_client_mode(False)
    CONF.set_override('image_conversion_dir', workdir)
    # cinder-volume's coordinator (our force-detach locks the volume in it)
    # and database (volume and attachment rows)
    CONF.set_override('backend_url', 'file://' + workdir, 'coordination')
    coordination.COORDINATOR.start()
    CONF.set_override('connection', 'sqlite:///' + os.path.join(
        workdir, 'cinder.sqlite'), 'database')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')     # alembic on SQLite constraints
        migration.db_sync()
    cluster = ceph.make_cluster(
        args.ceph_dir, own_dir=os.path.join(workdir, 'ceph'), osd_size='48G',
        mount_timeout=60, cls=ceph_dev.CephDev)
    try:
        cluster.up()
        print('ceph-dev.sh up: %.1f s; load average %s' % (
            cluster.up_seconds, open('/proc/loadavg').read().split()[0]),
            flush=True)
        ctx = cinder_context.get_admin_context()
        ours = ceph.make_rbd_driver(rbd_driver.RBDDriver, 'ours', cluster)
        upstream = ceph.make_rbd_driver(upstream_rbd.RBDDriver, 'upstream',
                                        cluster)

        print_detach(bench_detach(cluster, ctx, ours, upstream, args.rounds,
                                  args.window), args.window)
        sys.stdout.flush()
        for size_gb in sizes:
            print_reimage(size_gb, bench_reimage(
                cluster, ctx, ours, upstream, workdir, size_gb,
                size_gb in file_scheme, size_gb in full_write,
                modes=('warm', 'cold') if args.cold else ('warm',)))
            sys.stdout.flush()
        print('\nload average at the end: %s' %
              open('/proc/loadavg').read().split()[0])
    finally:
        coordination.COORDINATOR.stop()
        cluster.release()
        shutil.rmtree(workdir, ignore_errors=True)
    for failure in FAILED:
        print('CHECK FAILED: %s' % failure, file=sys.stderr)
    return 1 if FAILED else 0


if __name__ == '__main__':
    sys.exit(main())
