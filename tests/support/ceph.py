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

"""The single-node Ceph of the RBD functional tests, and its clients.

* :func:`get_cluster`: a ``tools/ceph-dev.sh`` cluster
  (:class:`devbox.ceph_dev.CephDev`) brought up once
  per test process in a private directory, on free ports, with
  client.cinder allowed to lift blocklist entries, and purged at the end
  (:func:`release_cluster`, or at exit).  ``CINDER_FORCEDETACH_TEST_CEPH_DIR``
  names a running cluster to use (and keep) instead.
* The bind shim: a tiny LD_PRELOAD library, compiled here with gcc, that
  binds a client's sockets to ``$CFD_BIND_IP`` so that each "host" talks
  to Ceph from its own loopback address (``HOST_IPS``).  Without gcc the
  cluster's ``shim`` is None and every client is 127.0.0.1.
* :class:`Writer`: a live librbd client in a subprocess, opening an image
  from connection_info and writing numbered blocks.

Used by :mod:`tests.functional.test_rbd`,
:mod:`tests.functional.test_rbd_detach_matrix` and
``benchmarks/rbd_force_detach.py``.
"""

import atexit
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from cinder_forcedetach.ceph import environ as ceph_environ
from devbox import ceph_dev
from tests import fakes

try:
    import rados
except ImportError:  # pragma: no cover - depends on the host
    rados = None

BLOCK = 4096
HOST_IPS = {'compute1': '127.0.0.11', 'compute2': '127.0.0.12',
            'compute3': '127.0.0.13'}
# The monitor may move to 127.0.0.2 (RefreshTestCase): ports free on both.
MON_ADDRS = ('127.0.0.1', '127.0.0.2')


def make_rbd_driver(cls, group, cluster):
    """A driver of *cls* on *cluster*, configured in section *group*.

    Configured before it is built: upstream's RBD driver reads its
    settings in ``__init__``.  For the benchmarks, which run the drivers
    without Cinder's services.
    """
    from cinder import context
    from cinder.volume import configuration
    from cinder.volume import driver as cinder_driver
    from cinder.volume.drivers import rbd as upstream_rbd
    from oslo_config import cfg

    from cinder_forcedetach.drivers import rbd as rbd_driver

    conf = cfg.CONF
    for opts in (cinder_driver.volume_opts, upstream_rbd.RBD_OPTS,
                 rbd_driver.rbd_opts):
        conf.register_opts(opts, group)
    for key, value in (('rbd_ceph_conf', cluster.conf),
                       ('rbd_user', cluster.user),
                       ('rbd_pool', cluster.pool),
                       ('volume_backend_name', group),
                       ('forcedetach_rbd_keyring', cluster.keyring)):
        conf.set_override(key, value, group)
    driver = cls(configuration=configuration.Configuration(
        cinder_driver.volume_opts, config_group=group))
    driver.do_setup(context.get_admin_context())
    driver.check_for_setup_error()
    return driver


def pick_mon_ports():
    """Two distinct ports (monitor msgr v1, v2) free where the mon may be."""
    return fakes.free_tcp_ports(2, addrs=MON_ADDRS)


# -- the cluster --------------------------------------------------------------


class TestCluster(ceph_dev.CephDev):
    """A CephDev with what the tests add: the bind shim, the Cinder key."""

    shim = None

    @property
    def cinder_key(self):
        """The client.cinder key: only ever compared, never printed."""
        return ceph_dev.keyring_key(self.keyring)

    def build_shim(self):
        """The LD_PRELOAD bind shim (None without a C compiler)."""
        self.shim = build_shim()
        return self.shim

    def release(self):
        super(TestCluster, self).release()
        if self.shim:
            shutil.rmtree(os.path.dirname(self.shim), ignore_errors=True)
            self.shim = None


def make_cluster(directory=None, own_dir=None, osd_size='8G',
                 cls=TestCluster, **kwargs):
    """The cluster of *directory* (kept), or our own (purged by release()).

    Ours is in *own_dir* (default: a per-process directory in the
    temporary directory), on free monitor ports, with an OSD of
    *osd_size*, and client.cinder may lift blocklist entries.
    """
    if directory:
        return cls(directory, owned=False, command_timeout=180, **kwargs)
    return cls(own_dir or os.path.join(
        tempfile.gettempdir(), 'cinder-forcedetach-ceph-test-%d' %
        os.getpid()),
        osd_size=osd_size, cinder_mon_caps=ceph_dev.FENCING_CINDER_MON_CAPS,
        pick_ports=pick_mon_ports, command_timeout=180, **kwargs)


def build_shim():
    """Compile the bind shim; its path, or None without a C compiler."""
    cc = shutil.which('gcc') or shutil.which('cc')
    if not cc:
        return None
    workdir = tempfile.mkdtemp(prefix='cfd-bindshim-')
    src = os.path.join(workdir, 'bindshim.c')
    with open(src, 'w') as f:
        f.write(BIND_SHIM_C)
    lib = os.path.join(workdir, 'bindshim.so')
    res = subprocess.run([cc, '-shared', '-fPIC', '-O2', '-o', lib, src,
                          '-ldl'], capture_output=True, text=True)
    if res.returncode:
        shutil.rmtree(workdir, ignore_errors=True)
        return None
    return lib


# connect() binds the socket to $CFD_BIND_IP first: the client then talks
# to the cluster from that loopback address, as a separate host would.
BIND_SHIM_C = r'''
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    static int (*real_connect)(int, const struct sockaddr *, socklen_t);
    const char *ip = getenv("CFD_BIND_IP");
    if (!real_connect)
        real_connect = dlsym(RTLD_NEXT, "connect");
    if (ip && addr && addr->sa_family == AF_INET) {
        struct sockaddr_in src;
        memset(&src, 0, sizeof(src));
        src.sin_family = AF_INET;
        if (inet_pton(AF_INET, ip, &src.sin_addr) == 1)
            bind(fd, (struct sockaddr *)&src, sizeof(src));
    }
    return real_connect(fd, addr, len);
}
'''

_CLUSTER = None
_CLUSTER_ERROR = None


def get_cluster():
    """The tests' cluster, brought up on first use (once per process)."""
    global _CLUSTER, _CLUSTER_ERROR
    if _CLUSTER_ERROR:
        raise unittest.SkipTest(_CLUSTER_ERROR)
    if _CLUSTER is None:
        if rados is None or not shutil.which('ceph-mon'):
            _CLUSTER_ERROR = ('Ceph is not installed (tools/install-ceph.sh '
                              '.venv)')
            raise unittest.SkipTest(_CLUSTER_ERROR)
        cluster = make_cluster(
            os.environ.get('CINDER_FORCEDETACH_TEST_CEPH_DIR'))
        atexit.register(cluster.release)
        cluster.up()
        cluster.build_shim()
        _CLUSTER = cluster
    return _CLUSTER


def release_cluster():
    """Purge the cluster of get_cluster() (a test module's teardown)."""
    global _CLUSTER
    if _CLUSTER is not None:
        _CLUSTER.release()
        atexit.unregister(_CLUSTER.release)
        _CLUSTER = None


# -- a live librbd client -----------------------------------------------------

# Opens the image from connection_info-like parameters and writes block
# after block, each stamped with its sequence number, printing one line
# per write: "OK seq t" or "ERR seq errno Name t".  It stops after 5 failed
# writes in a row, or after `count` writes (then it closes the image).
WRITER = r'''
import json, sys, time
import rados, rbd
p = json.loads(sys.argv[1])
conf = {'mon_host': p['mon_host'], 'keyring': p['keyring'],
        'client_mount_timeout': p['mount_timeout']}
client = rados.Rados(rados_id=p['user'], conf=conf)
client.connect()
ioctx = client.open_ioctx(p['pool'])
image = rbd.Image(ioctx, p['image'])
print('READY', client.get_addrs(), flush=True)
failures = 0
for seq in range(p['count']):
    block = (p['tag'].encode() + b' seq=%08d ' % seq).ljust(512, b'.') * 8
    try:
        image.write(block, (p['base'] + seq) * 4096)
        print('OK', seq, repr(time.time()), flush=True)
        failures = 0
    except Exception as err:
        print('ERR', seq, getattr(err, 'errno', None), type(err).__name__,
              repr(time.time()), flush=True)
        failures += 1
        if failures >= 5:
            break
    time.sleep(p['interval'])
if not failures:
    # a client done writing closes the image (its watch goes at once)
    image.close()
    ioctx.close()
    client.shutdown()
print('DONE', flush=True)
'''


def block_for(tag, seq):
    return (tag.encode() + b' seq=%08d ' % seq).ljust(512, b'.') * 8


class Writer(object):
    """A subprocess holding an RBD image open and writing to it.

    With the bind shim it talks to Ceph from *bind_ip*, by default the
    address *host*'s connector names (HOST_IPS).  *preexec_fn* runs in
    the child before it starts (a partition's group: it must be joined
    before the first connection, :func:`devbox.partitions.joiner`).
    """

    def __init__(self, cluster, info, host, tag='A', base=0, count=100000,
                 interval=0.02, mount_timeout=10, bind_ip=None,
                 preexec_fn=None):
        hosts, ports = info['hosts'], info['ports']
        pool, image = info['name'].split('/', 1)
        self.tag, self.base = tag, base
        self.params = {
            'mon_host': ','.join('%s:%s' % hp for hp in zip(hosts, ports)),
            'keyring': cluster.keyring, 'user': info['auth_username'],
            'pool': pool, 'image': image, 'tag': tag, 'base': base,
            'count': count, 'interval': interval,
            'mount_timeout': str(mount_timeout)}
        env = ceph_environ.clean_environ()
        bind_ip = bind_ip or HOST_IPS.get(host)
        shim = getattr(cluster, 'shim', None)
        if shim and bind_ip:
            env.update(LD_PRELOAD=shim, CFD_BIND_IP=bind_ip)
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, '-c', WRITER, json.dumps(self.params)],
            stdout=subprocess.PIPE, stderr=self.stderr, env=env,
            preexec_fn=preexec_fn)
        self.lines = []
        self._buf = b''
        self.addr = None
        self.stopped = False
        try:
            self.wait_for(lambda: self.addr is not None, 3 * mount_timeout,
                          'writer ready')
        except AssertionError:
            self.stop()
            raise

    def poll(self, timeout=0.0):
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            ready, _w, _x = select.select([fd], [], [], left)
            if not ready:
                return
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            self._buf += chunk
            *complete, self._buf = self._buf.split(b'\n')
            for line in complete:
                parts = line.decode().split()
                if parts and parts[0] == 'READY':
                    self.addr = parts[1]
                self.lines.append(parts)
            if time.monotonic() >= deadline:
                return

    def wait_for(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() >= deadline:
                self.stderr.seek(0)
                raise AssertionError('timed out waiting for %s; writer '
                                     'output %s, stderr %s' % (
                                         what, self.lines[-5:],
                                         self.stderr.read()[-2000:]))
            if self.proc.poll() is not None and not self._readable():
                self.poll(0.1)
                if not predicate():
                    raise AssertionError('writer exited (%s) before %s: %s'
                                         % (self.proc.returncode, what,
                                            self.lines[-5:]))
            self.poll(0.05)

    def _readable(self):
        ready, _w, _x = select.select([self.proc.stdout.fileno()], [], [], 0)
        return bool(ready)

    def oks(self):
        return [(int(p[1]), float(p[2])) for p in self.lines
                if p[0] == 'OK']

    def errs(self):
        return [(int(p[1]), p[2], p[3], float(p[4])) for p in self.lines
                if p[0] == 'ERR']

    def wait_oks(self, n, timeout=20):
        start = len(self.oks())
        self.wait_for(lambda: len(self.oks()) >= start + n, timeout,
                      '%d more successful writes' % n)

    def wait_fenced(self, timeout=10):
        self.wait_for(lambda: self.errs(), timeout, 'a failed write')
        return self.errs()[0]

    def finish(self, timeout=15):
        """Let it run into its error limit (or kill it); read everything."""
        try:
            self.wait_for(lambda: self.lines and self.lines[-1][0] == 'DONE',
                          timeout, 'writer done')
        finally:
            self.stop()

    def stop(self):
        if self.stopped:
            return
        self.stopped = True
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self.poll(0.2)
        self.stderr.close()
        self.proc.stdout.close()
