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

"""A single-node Ceph of ``tools/ceph-dev.sh``, driven from Python.

The one wrapper of the script: the developer stack (:mod:`.stack`), the
RBD functional tests and the RBD benchmark all use :class:`CephDev`.  It
runs ``ceph-dev.sh up|down [--purge]|status|env|move-mon`` with the
cluster's settings passed as ``CEPH_DEV_*`` variables (and no ``CEPH_*``
variable of the caller's environment), reads what ``env`` prints (paths,
user, pools, fsid, monitor address: never a key) and knows where the
script records its daemons' pids.

Only the standard library (and :mod:`cinder_forcedetach.ceph.environ`,
which needs no more) is imported at module level (the stack's
``down`` and ``status`` run without the venv); :meth:`CephDev.connect`
imports ``rados`` and :meth:`CephDev.blocklist` our Ceph helpers when
called.
"""

import os
import shlex
import subprocess
import time

from cinder_forcedetach.ceph import environ as ceph_environ

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO_ROOT, 'tools', 'ceph-dev.sh')
# Daemons of the cluster, in the script's start order.
DAEMONS = ('mon.a', 'mgr.x', 'osd.0')
# client.cinder may also lift the fences force-detach adds.
FENCING_CINDER_MON_CAPS = 'profile rbd, allow command "osd blocklist"'
# `ceph-dev.sh env` variable -> attribute of CephDev
ENV_ATTRS = (('CEPH_CONF', 'conf'), ('CEPH_KEYRING', 'keyring'),
             ('CEPH_ADMIN_KEYRING', 'admin_keyring'), ('CEPH_USER', 'user'),
             ('CEPH_POOL', 'pool'), ('CEPH_IMAGES_POOL', 'images_pool'),
             ('CEPH_FSID', 'fsid'), ('CEPH_MON_HOST', 'mon_host'),
             ('CEPH_MON_PORT', 'mon_port'))


class CephDevError(Exception):
    pass


def parse_env(text):
    """``{CEPH_*: value}`` of ``ceph-dev.sh env`` output (shell-unquoted)."""
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith('export CEPH_') or '=' not in line:
            continue
        key, _sep, value = line[len('export '):].partition('=')
        words = shlex.split(value) if value else ['']
        values[key] = words[0] if words else ''
    return values


def keyring_key(path):
    """The (base64) key of a keyring file, or None.  Never print it."""
    with open(path) as f:
        for line in f:
            name, sep, value = line.partition('=')
            if sep and name.strip() == 'key':
                return value.strip()
    return None


class CephDev(object):
    """The ``tools/ceph-dev.sh`` cluster in *directory*.

    Settings left None are the script's defaults (or, for an existing
    cluster, what it was created with).  *pick_ports*, a callable
    returning two free ports (msgr v1, v2), chooses the monitor's ports
    when none are given, and again when ``up`` fails (another process
    may have taken them meanwhile): then the half-made cluster is purged
    and ``up`` retried up to *retries* times.  *owned*: :meth:`release`
    purges the cluster (else it leaves it running, e.g. a cluster the
    caller was pointed at).  *command_timeout*: of a ceph-dev.sh run;
    *mount_timeout*: of :meth:`connect`.
    """

    def __init__(self, directory, mon_addr=None, daemon_addr=None,
                 mon_port=None, mon_port_v2=None, osd_size=None,
                 cinder_mon_caps=None, pick_ports=None, retries=2,
                 owned=True, command_timeout=300, mount_timeout=10,
                 script=SCRIPT):
        self.dir = os.path.abspath(directory)
        self.script = script
        self.owned = owned
        self.pick_ports = pick_ports
        self.retries = retries if pick_ports else 0
        self.command_timeout = command_timeout
        self.mount_timeout = mount_timeout
        self.settings_env = {'CEPH_DEV_DIR': self.dir}
        for name, value in (('CEPH_DEV_MON_ADDR', mon_addr),
                            ('CEPH_DEV_DAEMON_ADDR', daemon_addr),
                            ('CEPH_DEV_OSD_SIZE', osd_size),
                            ('CEPH_DEV_CINDER_MON_CAPS', cinder_mon_caps)):
            if value is not None:
                self.settings_env[name] = str(value)
        if mon_port is None and pick_ports is not None:
            mon_port, mon_port_v2 = pick_ports()
        self._set_ports(mon_port, mon_port_v2)
        self.up_seconds = None
        for _var, attr in ENV_ATTRS:
            setattr(self, attr, None)

    def _set_ports(self, port, port_v2):
        for name, value in (('CEPH_DEV_MON_PORT', port),
                            ('CEPH_DEV_MON_PORT_V2', port_v2)):
            if value is not None:
                self.settings_env[name] = str(value)

    @property
    def env(self):
        """The environment ceph-dev.sh runs with."""
        env = ceph_environ.clean_environ()
        env.update(self.settings_env)
        return env

    # -- the script ----------------------------------------------------------

    def run(self, *args, check=False, timeout=None):
        """``ceph-dev.sh ARGS``; with *check* a failure raises CephDevError."""
        res = subprocess.run(
            [self.script] + list(args), env=self.env, capture_output=True,
            text=True, timeout=timeout or self.command_timeout)
        if check and res.returncode:
            raise CephDevError('tools/ceph-dev.sh %s failed (%d): %s' % (
                ' '.join(args), res.returncode, res.stderr.strip()[-2000:]))
        return res

    def up(self):
        """Bring the cluster up (create it if need be); read its settings."""
        t0 = time.monotonic()
        res = self.run('up')
        for _retry in range(self.retries):
            if not res.returncode:
                break
            # Another process may have taken the ports we picked: start
            # over on new ones.
            self.run('down', '--purge', timeout=60)
            self._set_ports(*self.pick_ports())
            res = self.run('up')
        if res.returncode:
            raise CephDevError('tools/ceph-dev.sh up failed (%d): %s' % (
                res.returncode, res.stderr.strip()[-2000:]))
        self.up_seconds = time.monotonic() - t0
        self.read_env()
        return self

    def ready(self):
        """Whether ``ceph-dev.sh status`` finds the cluster ready."""
        return self.run('status').returncode == 0

    def down(self, purge=False, check=True, timeout=None):
        args = ('down', '--purge') if purge else ('down',)
        return self.run(*args, check=check, timeout=timeout)

    def release(self):
        """Purge the cluster if we own it; leave another's running."""
        if self.owned:
            self.down(purge=True, check=False, timeout=60)

    def settings(self):
        """``{CEPH_*: value}`` from ``ceph-dev.sh env`` (paths, no keys)."""
        return parse_env(self.run('env', check=True).stdout)

    def read_env(self):
        values = self.settings()
        for var, attr in ENV_ATTRS:
            setattr(self, attr, values.get(var))
        return values

    def move_mon(self, addr, port=None):
        """Move the monitor to *addr* (and *port*); read the new settings."""
        args = ('move-mon', addr) + ((str(port),) if port else ())
        self.run(*args, check=True)
        self.read_env()

    # -- its processes -------------------------------------------------------

    def pidfile(self, name):
        """Where the script records the pid of daemon *name* (``osd.0``)."""
        return os.path.join(self.dir, 'run', '%s.pid' % name)

    def pid(self, name):
        """The pid recorded for daemon *name*, or None."""
        try:
            with open(self.pidfile(name)) as f:
                return int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def mon_pid(self):
        return self.pid('mon.a')

    def pids(self):
        """``{daemon: pid}`` of the daemons with a pid record."""
        return {name: pid for name, pid in ((n, self.pid(n))
                                            for n in DAEMONS) if pid}

    # -- clients -------------------------------------------------------------

    def admin(self, *args, timeout=60):
        """``ceph ARGS`` as client.admin, its keyring passed explicitly."""
        return subprocess.run(
            ['ceph', '-c', self.conf, '-n', 'client.admin', '-k',
             self.admin_keyring, '--connect-timeout', '10'] + list(args),
            env=ceph_environ.clean_environ(), capture_output=True, text=True,
            timeout=timeout)

    def blocklist(self):
        """The addresses in the OSD blocklist."""
        from cinder_forcedetach.ceph import cluster as ceph_cluster
        out = self.admin('osd', 'blocklist', 'ls', '--format', 'json')
        return {e['addr'] for e in ceph_cluster.parse_json_prefix(out.stdout)}

    def public_ports(self):
        """The TCP ports clients reach the monitors and OSDs on.

        What a host cut off from the storage network can no longer reach
        (:mod:`devbox.partitions`).
        """
        from cinder_forcedetach.ceph import cluster as ceph_cluster
        ports = set()
        for kind, key in (('mon', 'mons'), ('osd', 'osds')):
            out = self.admin(kind, 'dump', '--format', 'json')
            if out.returncode:
                raise CephDevError('ceph %s dump failed: %s' % (
                    kind, out.stderr.strip()[-500:]))
            for daemon in ceph_cluster.parse_json_prefix(out.stdout)[key]:
                for addr in daemon['public_addrs']['addrvec']:
                    ports.add(int(addr['addr'].rsplit(':', 1)[1]))
        return sorted(ports)

    def connect(self, mount_timeout=None):
        """A connected ``rados.Rados`` as the Cinder user (shut it down)."""
        import rados
        client = rados.Rados(rados_id=self.user, conffile=self.conf)
        client.conf_set('client_mount_timeout',
                        str(mount_timeout or self.mount_timeout))
        client.connect()
        return client
