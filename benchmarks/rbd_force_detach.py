#!/usr/bin/env python3
"""RBD force-detach and reimage: ours against upstream Cinder, one cluster.

On one real single-node Ceph cluster (``tools/ceph-dev.sh``, brought up in a
private directory unless ``--ceph-dir`` names a running one) it measures:

* fence-to-reattachable: a live librbd writer (a subprocess) holds the
  volume; time from the start of ``RBDDriver.fence_clients`` until a new
  client has opened the image and written, and the fenced writer's error.
  Upstream has nothing to compare with (its ``terminate_connection`` is a
  no-op: the old writer keeps writing); its anchor is measured too: a new
  writer facing a SIGKILLed, unfenced holder (librbd waits for the watch
  to time out).  Other anchors: Kubernetes force-detaches after 6 min,
  ceph-csi backs off ~70 s on a stale watcher.
* reimage of a 1 GiB and a 10 GiB raw image (``--sizes``), sparse (one
  1 MiB extent of data per 16 MiB), onto an existing volume holding old
  data, three ways:

  - clone: ours, the image in the same cluster (``rbd://fsid/images/ID/
    snap``): the volume becomes a copy-on-write clone;
  - stream: ours, the image as a local file (``file://``): discard, then
    ``qemu-img convert`` straight into the RBD image, no temporary file;
  - upstream: ``cinder.volume.drivers.rbd.RBDDriver.copy_image_to_volume``
    with ``disable_sparse=True`` as Cinder's manager calls it for
    os-reimage, from an image service serving the same local file (it
    downloads to a temporary file, then ``qemu-img convert -S 0`` into
    the volume).

  Each result is verified (every data extent, one block of every hole, and
  no old data left), and the ratios upstream/ours are printed.

Usage: .venv/bin/python benchmarks/rbd_force_detach.py [--sizes 1,10]
           [--rounds 5] [--no-dead-holder] [--ceph-dir DIR]
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

from cinder import context as cinder_context  # noqa: E402
import cinder.privsep  # noqa: E402
from cinder.tests.unit import fake_volume  # noqa: E402
from cinder.volume import configuration  # noqa: E402
from cinder.volume import driver as cinder_driver  # noqa: E402
from cinder.volume.drivers import rbd as upstream_rbd  # noqa: E402
from oslo_concurrency import lockutils  # noqa: E402
from oslo_config import cfg  # noqa: E402
from oslo_utils import units  # noqa: E402
import rados  # noqa: E402
import rbd  # noqa: E402

from cinder_forcedetach.drivers import rbd as rbd_driver  # noqa: E402
from tests.functional import test_rbd  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CEPH_DEV = os.path.join(REPO, 'tools', 'ceph-dev.sh')
EXTENT = units.Mi
STRIDE = 16 * units.Mi
CONF = cfg.CONF


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


class Cluster(object):
    def __init__(self, ceph_dir, workdir):
        self.owned = ceph_dir is None
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith('CEPH_')}
        self.env['CEPH_DEV_DIR'] = ceph_dir or os.path.join(workdir, 'ceph')
        if self.owned:
            self.env.update(
                CEPH_DEV_MON_PORT=str(free_port()),
                CEPH_DEV_MON_PORT_V2=str(free_port()),
                CEPH_DEV_OSD_SIZE='48G',
                CEPH_DEV_CINDER_MON_CAPS='profile rbd, '
                                         'allow command "osd blocklist"')
        self.up_seconds = None
        self.shim = None

    def up(self):
        t0 = time.monotonic()
        res = subprocess.run([CEPH_DEV, 'up'], env=self.env, text=True,
                             capture_output=True)
        if res.returncode:
            sys.exit('ceph-dev.sh up failed: %s' % res.stderr)
        self.up_seconds = time.monotonic() - t0
        out = subprocess.run([CEPH_DEV, 'env'], env=self.env, text=True,
                             capture_output=True, check=True).stdout
        values = dict(line.replace('export ', '', 1).split('=', 1)
                      for line in out.splitlines() if '=' in line)
        self.conf = values['CEPH_CONF']
        self.keyring = values['CEPH_KEYRING']
        self.user = values['CEPH_USER']
        self.pool = values['CEPH_POOL']
        self.images_pool = values['CEPH_IMAGES_POOL']
        self.fsid = values['CEPH_FSID']

    def down(self):
        if self.owned:
            subprocess.run([CEPH_DEV, 'down', '--purge'], env=self.env,
                           capture_output=True)

    def connect(self):
        client = rados.Rados(rados_id=self.user, conffile=self.conf)
        client.conf_set('client_mount_timeout', '60')
        client.connect()
        return client


class FileImages(object):
    """An image service over local files and Ceph images."""

    def __init__(self):
        self.images = {}
        self.temp_images = None     # Cinder's image cache hook (unused)

    def add(self, image_id, path, size, url):
        self.images[image_id] = (path, size, url)

    def show(self, context, image_id):
        _path, size, _url = self.images[image_id]
        return {'id': image_id, 'disk_format': 'raw',
                'container_format': 'bare', 'size': size,
                'status': 'active', 'properties': {}, 'min_disk': 0}

    def get_location(self, context, image_id):
        url = self.images[image_id][2]
        return url, [{'url': url, 'metadata': {}}]

    def download(self, context, image_id, data=None):
        path = self.images[image_id][0]

        def chunks():
            with open(path, 'rb') as f:
                for chunk in iter(lambda: f.read(4 * units.Mi), b''):
                    yield chunk
        if data is None:
            return chunks()
        for chunk in chunks():
            data.write(chunk)


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
    images.add(file_id, path, size, 'file://' + path)
    images.add(rbd_id, path, size, 'rbd://%s/%s/%s/snap' % (
        cluster.fsid, cluster.images_pool, name))
    return file_id, rbd_id, name, path


def old_volume(ctx, ours, size_gb):
    vol = fake_volume.fake_volume_obj(ctx, id=str(uuid.uuid4()),
                                      size=size_gb, host='bench@rbd#rbd')
    ours.create_volume(vol)
    with ours._open_file(vol) as f:
        for i in range(size_gb * units.Gi // STRIDE):
            f.seek(i * STRIDE + STRIDE // 2)        # into every hole
            f.write(b'OLD!' * 1024)
    return vol


def verify(cluster, vol, size_gb):
    client = cluster.connect()
    try:
        with client.open_ioctx(cluster.pool) as ioctx:
            with rbd.Image(ioctx, vol.name, read_only=True) as image:
                for i in range(size_gb * units.Gi // STRIDE):
                    if image.read(i * STRIDE, EXTENT) != extent(i):
                        return 'extent %d differs' % i
                    if image.read(i * STRIDE + STRIDE // 2,
                                  4096) != b'\0' * 4096:
                        return 'old data left in hole %d' % i
    finally:
        client.shutdown()
    return 'verified'


def delete(driver, vol):
    try:
        driver.delete_volume(vol)
    except Exception as err:
        print('  (cleanup of %s: %s)' % (vol.name, err))


def bench_reimage(cluster, ctx, ours, upstream, images, workdir, size_gb):
    file_id, rbd_id, name, path = make_images(cluster, images, workdir,
                                              size_gb)
    results = {}
    for way, driver, image_id in (('clone', ours, rbd_id),
                                  ('stream', ours, file_id),
                                  ('upstream', upstream, file_id)):
        vol = old_volume(ctx, ours, size_gb)
        t0 = time.monotonic()
        driver.copy_image_to_volume(ctx, vol, images, image_id,
                                    disable_sparse=True)
        elapsed = time.monotonic() - t0
        results[way] = (elapsed, verify(cluster, vol, size_gb))
        delete(ours, vol)
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


def new_writer(cluster, vol):
    client = cluster.connect()
    try:
        with client.open_ioctx(cluster.pool) as ioctx:
            with rbd.Image(ioctx, vol.name) as image:
                image.write(b'N' * 4096, 0)
                image.flush()
    finally:
        client.shutdown()


def start_writer(cluster, vol):
    """A live librbd client holding *vol* and writing (a subprocess)."""
    mon = ''
    with open(cluster.conf) as f:
        for line in f:
            key, _sep, value = line.partition('=')
            if key.strip().replace(' ', '_') == 'mon_host':
                mon = value.strip()
    params = {'mon_host': mon, 'keyring': cluster.keyring,
              'user': cluster.user, 'pool': cluster.pool, 'image': vol.name,
              'tag': 'W', 'base': 0, 'count': 10 ** 6, 'interval': 0.005,
              'mount_timeout': '30'}
    w = test_rbd.Writer.__new__(test_rbd.Writer)
    env = {k: v for k, v in os.environ.items() if not k.startswith('CEPH_')}
    w.tag, w.base, w.params = 'W', 0, params
    w.stderr = tempfile.TemporaryFile()
    w.proc = subprocess.Popen(
        [sys.executable, '-c', test_rbd.WRITER, json.dumps(params)],
        stdout=subprocess.PIPE, stderr=w.stderr, env=env)
    w.lines, w._buf, w.addr, w.stopped = [], b'', None, False
    w.wait_for(lambda: w.addr is not None, 60, 'writer ready')
    w.wait_oks(5)
    return w


def bench_fence(cluster, ctx, ours, rounds):
    fence, reattach, errors = [], [], []
    for _ in range(rounds):
        vol = fake_volume.fake_volume_obj(ctx, id=str(uuid.uuid4()), size=1)
        ours.create_volume(vol)
        w = start_writer(cluster, vol)
        t0 = time.monotonic()
        targets = ours.fence_clients(vol, [None], [])
        t1 = time.monotonic()
        new_writer(cluster, vol)
        t2 = time.monotonic()
        seq, err_no, name, _t = w.wait_fenced()
        w.stop()
        assert targets == [w.addr], (targets, w.addr)
        fence.append(t1 - t0)
        reattach.append(t2 - t0)
        errors.append('%s errno %s' % (name, err_no))
        ours.lift_fence(vol)
        delete(ours, vol)
    return fence, reattach, sorted(set(errors))


def bench_dead_holder(cluster, ctx, ours):
    """Upstream's case: a holder died unfenced; a new writer's wait."""
    vol = fake_volume.fake_volume_obj(ctx, id=str(uuid.uuid4()), size=1)
    ours.create_volume(vol)
    w = start_writer(cluster, vol)
    w.proc.send_signal(signal.SIGKILL)
    w.stop()
    t0 = time.monotonic()
    new_writer(cluster, vol)
    elapsed = time.monotonic() - t0
    delete(ours, vol)
    return elapsed


def make_driver(cls, group, cluster):
    """A driver of *cls* configured in section *group*.

    Configured before it is built: upstream reads settings in __init__.
    """
    for opts in (cinder_driver.volume_opts, upstream_rbd.RBD_OPTS,
                 rbd_driver.rbd_opts):
        CONF.register_opts(opts, group)
    for key, value in (('rbd_ceph_conf', cluster.conf),
                       ('rbd_user', cluster.user),
                       ('rbd_pool', cluster.pool),
                       ('volume_backend_name', group),
                       ('forcedetach_rbd_keyring', cluster.keyring)):
        CONF.set_override(key, value, group)
    driver = cls(configuration=configuration.Configuration(
        cinder_driver.volume_opts, config_group=group))
    driver.do_setup(cinder_context.get_admin_context())
    driver.check_for_setup_error()
    return driver


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--sizes', default='1,10',
                        help='image sizes in GiB (default 1,10)')
    parser.add_argument('--rounds', type=int, default=5,
                        help='fence rounds (default 5)')
    parser.add_argument('--no-dead-holder', action='store_true',
                        help='skip the ~30 s unfenced dead-holder anchor')
    parser.add_argument('--ceph-dir', default=None,
                        help='use the running tools/ceph-dev.sh cluster of '
                             'this directory')
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(',') if s]

    workdir = tempfile.mkdtemp(prefix='fd-rbd-bench-')
    CONF([], project='cinder', default_config_files=[])
    lockutils.set_defaults(workdir)
    # We are root: upstream's privileged calls (qemu-img info, convert) run
    # in this process instead of a privsep daemon started through sudo.
    cinder.privsep.sys_admin_pctxt.set_client_mode(False)
    CONF.set_override('image_conversion_dir', workdir)
    cluster = Cluster(args.ceph_dir, workdir)
    try:
        cluster.up()
        print('ceph-dev.sh up: %.1f s' % cluster.up_seconds, flush=True)
        ctx = cinder_context.get_admin_context()
        ours = make_driver(rbd_driver.RBDDriver, 'ours', cluster)
        upstream = make_driver(upstream_rbd.RBDDriver, 'upstream', cluster)

        fence, reattach, errors = bench_fence(cluster, ctx, ours,
                                              args.rounds)
        print('fence (fence_clients, %d rounds): median %.3f s, max %.3f s; '
              'fence to new writer: median %.3f s, max %.3f s (target < 2 s);'
              ' fenced writer saw: %s' % (
                  len(fence), statistics.median(fence), max(fence),
                  statistics.median(reattach), max(reattach),
                  ', '.join(errors)), flush=True)
        if not args.no_dead_holder:
            dead = bench_dead_holder(cluster, ctx, ours)
            print('upstream anchor: new writer behind a SIGKILLed unfenced '
                  'holder: %.1f s (ratio %.0fx); k8s force-detach 360 s '
                  '(%.0fx), ceph-csi watcher back-off ~70 s (%.0fx)' % (
                      dead, dead / statistics.median(reattach),
                      360 / statistics.median(reattach),
                      70 / statistics.median(reattach)), flush=True)

        for size_gb in sizes:
            r = bench_reimage(cluster, ctx, ours, upstream, FileImages(),
                              workdir, size_gb)
            print('reimage %2d GiB: clone %.2f s (%s), stream %.2f s (%s), '
                  'upstream %.2f s (%s); upstream/clone %.1fx (target >= '
                  '10x), upstream/stream %.1fx' % (
                      size_gb, r['clone'][0], r['clone'][1],
                      r['stream'][0], r['stream'][1], r['upstream'][0],
                      r['upstream'][1], r['upstream'][0] / r['clone'][0],
                      r['upstream'][0] / r['stream'][0]), flush=True)
    finally:
        cluster.down()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == '__main__':
    main()
