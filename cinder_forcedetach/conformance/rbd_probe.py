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

"""The conformance probe of RBD drivers: live clients, read from Ceph.

On RBD nothing is granted: a host reaches an image while it holds a live
librbd client that the OSDs still serve.  So :class:`RBDProbe`

* makes the clients: :meth:`RBDProbe.connect` starts, per attachment the
  kit makes, a librbd client in a subprocess (:class:`LiveClient`) that
  opens the image from the attachment's ``connection_info`` as os-brick
  would (monitors and user from it, the keyring from the probe or the
  driver's configuration), writes one block (so it takes the exclusive
  lock, as a guest does) and holds the image until it is told to close;
  R8 makes a client write again (:meth:`RBDProbe.write_block`) and reads
  what the image holds through a fresh connection
  (:meth:`RBDProbe.read_block`);
* reads access from the cluster only: the image header's watchers (a
  read-only open, which registers no watch of its own) minus the
  addresses in the OSD blocklist.  A host has access while a watcher at
  one of its connector's IPs is not blocklisted; the volume is exported
  while any watcher is.  A watch is the proof of a live client: locks
  alone can outlive their owner.

Each client must talk to Ceph from its host's address (the connector's
``ip``), or the driver could not tell the hosts apart.  On one machine
that takes an ``LD_PRELOAD`` library that binds the client's sockets to
``$CFD_BIND_IP`` (``bind_shim``, or ``$CINDER_FORCEDETACH_BIND_SHIM``;
our tests build one, see ``tests/functional/ceph.py``).  Without it the
clients use the machine's own source address, and :meth:`RBDProbe.connect`
fails when that is not the connector's ``ip``.
"""

import json
import os
import select
import subprocess
import sys
import tempfile
import time

from cinder_forcedetach.ceph import cluster
from cinder_forcedetach.ceph import environ as ceph_environ
from cinder_forcedetach.ceph import fencing
from cinder_forcedetach.conformance import probe

rbd = cluster.rbd

SHIM_ENV = 'CINDER_FORCEDETACH_BIND_SHIM'
KEYRING_ENV = 'CINDER_FORCEDETACH_PROBE_KEYRING'

# A host's librbd client: opens the image, writes its first block, says
# "READY <address>", holds the image until "close" (or EOF) on stdin, then
# closes it (its watch goes at once) and says "CLOSED".  Meanwhile
# "write <offset> <byte>" writes one block of that byte and flushes it:
# "WROTE <offset>", or "FAILED <offset> <errno> <exception>" (a fenced
# client's write fails, errno 108).
CLIENT = r'''
import json, sys
import rados, rbd
p = json.loads(sys.argv[1])
conf = {'mon_host': p['mon_host']}
for key in ('client_mount_timeout', 'rados_mon_op_timeout',
            'rados_osd_op_timeout'):
    conf[key] = str(p['timeout'])
if p['keyring']:
    conf['keyring'] = p['keyring']
client = rados.Rados(rados_id=p['user'], clustername=p['cluster'], conf=conf)
client.connect()
ioctx = client.open_ioctx(p['pool'])
image = rbd.Image(ioctx, p['image'])
image.write(b'conformance live client\n'.ljust(4096, b'.'), 0)
print('READY', client.get_addrs(), flush=True)
for line in sys.stdin:
    words = line.split()
    if words == ['close']:
        break
    if len(words) == 3 and words[0] == 'write':
        offset, byte = int(words[1]), int(words[2])
        try:
            image.write(bytes([byte]) * 4096, offset)
            image.flush()
            print('WROTE', offset, flush=True)
        except Exception as err:
            print('FAILED', offset, getattr(err, 'errno', None),
                  type(err).__name__, flush=True)
try:
    image.close()
    ioctx.close()
    client.shutdown()
except Exception as err:
    print('ERROR', type(err).__name__, err, flush=True)
print('CLOSED', flush=True)
'''


#: A live client could not be started as the connector says.
ProbeError = probe.ProbeError


class LiveClient(object):
    """A librbd client in a subprocess holding one image open.

    :param params: what :data:`CLIENT` reads (monitors, user, keyring,
        pool, image, timeout).
    :param bind_ip: the address its sockets bind to (needs *shim*).
    :param shim: path of the ``LD_PRELOAD`` bind library, or None.
    """

    def __init__(self, params, bind_ip=None, shim=None, timeout=30):
        env = ceph_environ.clean_environ()
        if shim and bind_ip:
            env.update(LD_PRELOAD=shim, CFD_BIND_IP=bind_ip)
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, '-c', CLIENT, json.dumps(params)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.stderr, env=env)
        self.lines = []
        self._buf = b''
        self.addr = None
        try:
            ready = self._read_until('READY', timeout)
        except BaseException:
            self.kill()
            raise
        if not ready:
            self.stderr.seek(0)
            err = self.stderr.read().decode(errors='replace').strip()
            self.kill()
            raise ProbeError('the live client of image %s did not open it '
                             'within %d s (output %s): %s' % (
                                 params['image'], timeout, self.lines[-3:],
                                 err[-1000:]))
        self.addr = fencing.normalize_addr(ready[1])

    def _read_until(self, word, timeout, start=0):
        """The first output line from line *start* on starting with *word*.

        *word*: one word or a tuple of them.  None: timed out or exited.
        """
        words = (word,) if isinstance(word, str) else tuple(word)
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while True:
            for parts in self.lines[start:]:
                if parts and parts[0] in words:
                    return parts
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _w, _x = select.select([fd], [], [], min(left, 0.5))
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return None                 # it exited
            self._buf += chunk
            *complete, self._buf = self._buf.split(b'\n')
            self.lines.extend(line.decode(errors='replace').split()
                              for line in complete)

    def write(self, offset, byte, timeout):
        """One block of *byte* at *offset*, flushed.

        True: written; False: the write failed (the line says why, in
        :attr:`lines`); None: no answer within *timeout* (or it exited).
        """
        if self.proc.poll() is not None:
            return None
        start = len(self.lines)
        try:
            self.proc.stdin.write(b'write %d %d\n' % (offset, byte))
            self.proc.stdin.flush()
        except (OSError, ValueError):
            return None
        parts = self._read_until(('WROTE', 'FAILED'), timeout, start=start)
        return None if parts is None else parts[0] == 'WROTE'

    def ask_close(self):
        """Tell it to close the image and exit (see :meth:`wait_closed`)."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b'close\n')
                self.proc.stdin.flush()
            except (OSError, ValueError):
                pass

    def wait_closed(self, timeout=10):
        """Wait for it to exit; killed if it takes longer than *timeout*.

        Its last lines are read even when it has exited already: the pipe
        still holds them.
        """
        self._read_until('CLOSED', timeout)
        try:
            self.proc.wait(timeout=max(0.1, timeout))
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.stderr):
            try:
                stream.close()
            except (OSError, ValueError):
                pass


def _blocklisted(addr, blocklist):
    """Whether the client instance *addr*, or its whole IP, is blocklisted."""
    ip = fencing.addr_ip(addr)
    whole = ('[%s]:0/0' if ':' in ip else '%s:0/0') % ip
    return addr in blocklist or whole in blocklist


class RBDProbe(probe.AccessProbe):
    """Live clients per host; access = watchers not blocklisted.

    Works for drivers built on Cinder's ``RBDDriver`` (the image is
    ``volume.name`` in ``rbd_pool``; the cluster is reached with
    ``rbd_ceph_conf``, ``rbd_cluster_name``, ``rbd_user`` and the keyring
    below).  Class attributes a subclass may set:

    * ``bind_shim``: the ``LD_PRELOAD`` bind library (default
      ``$CINDER_FORCEDETACH_BIND_SHIM``);
    * ``keyring``: the keyring file of the clients and of the probe's own
      reads (default ``$CINDER_FORCEDETACH_PROBE_KEYRING``, then the
      driver's ``forcedetach_rbd_keyring``, then ``rbd_keyring_conf``,
      then what the Ceph configuration names);
    * ``timeout``: seconds librados may wait in each call.
    """

    bind_shim = None
    keyring = None
    timeout = 20

    def __init__(self):
        self.clients = []
        if self.bind_shim is None:
            self.bind_shim = os.environ.get(SHIM_ENV) or None
        if self.keyring is None:
            self.keyring = os.environ.get(KEYRING_ENV) or None

    # -- the cluster ---------------------------------------------------------

    def _keyring(self, driver):
        conf = driver.configuration
        return (self.keyring or conf.safe_get('forcedetach_rbd_keyring') or
                conf.safe_get('rbd_keyring_conf') or None)

    def _access(self, driver):
        conf = driver.configuration
        return cluster.Access(name=conf.safe_get('rbd_cluster_name') or
                              'ceph',
                              # '': librados' default search path
                              conf=conf.safe_get('rbd_ceph_conf') or '',
                              user=conf.safe_get('rbd_user'),
                              keyring=self._keyring(driver),
                              timeout=self.timeout)

    def live_holders(self, driver, volume):
        """Addresses of the clients that watch the image, not blocklisted.

        A fresh connection per call, shut down before it returns: the kit
        forks (R5), and the parent then holds no librados state of ours.
        """
        pool = driver.configuration.safe_get('rbd_pool')
        with cluster.connect(self._access(driver), pool) as (client, ioctx):
            own = fencing.normalize_addr(client.get_addrs())
            try:
                with rbd.Image(ioctx, volume.name, read_only=True) as image:
                    watchers = [fencing.normalize_addr(w['addr'])
                                for w in image.watchers_list()]
            except rbd.ImageNotFound:
                return set()
            blocklist = {fencing.normalize_addr(e['addr'])
                         for e in cluster.mon_json(
                             client, {'prefix': 'osd blocklist ls'})}
        return {addr for addr in watchers
                if addr and addr != own and not _blocklisted(addr, blocklist)}

    # -- AccessProbe ---------------------------------------------------------

    def host_has_access(self, driver, volume, connector):
        ips = fencing.connector_ips(connector)
        if not ips:
            return False
        return any(fencing.addr_ip(addr) in ips
                   for addr in self.live_holders(driver, volume))

    def exported(self, driver, volume):
        return bool(self.live_holders(driver, volume))

    def connect(self, driver, volume, connector, connection_info):
        """Start the host's librbd client on the attachment's image."""
        info = dict(connection_info or {})
        info = info.get('data', info)
        if not info.get('name') or not info.get('hosts'):
            raise ProbeError('connection_info %r names no image or '
                             'monitors' % sorted(info))
        pool, image = info['name'].split('/', 1)
        hosts, ports = info['hosts'], info.get('ports') or []
        mons = ','.join(
            ('[%s]:%s' if ':' in h else '%s:%s') % (h, p) if p else h
            for h, p in zip(hosts, list(ports) + [None] * len(hosts)))
        params = {'mon_host': mons, 'user': info.get('auth_username'),
                  'cluster': info.get('cluster_name') or 'ceph',
                  'keyring': self._keyring(driver), 'pool': pool,
                  'image': image, 'timeout': self.timeout}
        ip = (connector or {}).get('ip')
        client = LiveClient(params, bind_ip=ip, shim=self.bind_shim,
                            timeout=3 * self.timeout)
        client.key = probe.client_key(volume, connector)
        self.clients.append(client)
        if ip and fencing.addr_ip(client.addr) != ip:
            raise ProbeError(
                'the live client of host %s talks to Ceph from %s, not from '
                'its connector\'s ip %s: give RBDProbe a bind shim (%s) or '
                'connectors whose ip is this machine\'s source address' % (
                    connector.get('host'), client.addr, ip, SHIM_ENV))
        return client.addr

    def write_block(self, driver, volume, connector, offset, pattern):
        """The host's live client writes one block (flushed)."""
        client = probe.client_for(self.clients, volume, connector)
        if client is None:
            return None
        done = client.write(offset, pattern, self.timeout)
        if done is None:
            # No answer: stopped, so that the write cannot land later.
            client.kill()
            self.clients.remove(client)
        return done

    def read_block(self, driver, volume, connector, offset):
        """The block as the cluster has it, through a fresh connection.

        Read-only (no watch, no lock), from this probe's own address: what
        a fenced client still had in its cache does not count.
        """
        pool = driver.configuration.safe_get('rbd_pool')
        with cluster.connect(self._access(driver), pool) as (_client,
                                                             ioctx):
            try:
                with rbd.Image(ioctx, volume.name, read_only=True) as image:
                    return image.read(offset, probe.BLOCK)
            except rbd.ImageNotFound:
                return None

    def disconnect_all(self):
        clients, self.clients = self.clients, []
        for client in clients:
            client.ask_close()
        deadline = time.monotonic() + 10
        for client in clients:
            client.wait_closed(deadline - time.monotonic())
