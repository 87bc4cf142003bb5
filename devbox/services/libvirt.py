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

"""libvirtd (``--nova --virt libvirt``): the hypervisor of Nova's computes.

Debian's ``libvirtd`` started as the box's process, not by systemd, in a
private mount namespace where ``/etc/libvirt``, ``/run/libvirt`` and
``/var/{lib,log,cache}/libvirt`` are directories under ``STATE/libvirt``:
the machine's own libvirt configuration is neither read nor changed, and
the daemon's socket is a file of the box
(``qemu+unix:///system?socket=STATE/libvirt/run/libvirt-sock``).  One
libvirtd per compute host (``--computes 2``: ``libvirtd-2`` under
``STATE/libvirt-2``), each in its own UTS namespace named after its
compute host: libvirt names Nova's node (and placement's resource
provider) after its hostname, which two daemons of one machine would
otherwise share.  Guests
run under qemu's TCG (Nova's ``virt_type = qemu``): KVM is nested here and
hangs guests.  ``qemu.conf`` turns off what a container without systemd
lacks (cgroups, mount namespaces per guest, relabelling) and lets qemu
write its console log itself (no virtlogd).
"""

import os
import subprocess
import tempfile

from devbox import boxutil
from devbox import ceph_dev
from devbox import computes
from devbox.services import base

#: The libvirt secret of the Ceph user's key, named by Cinder's
#: ``rbd_secret_uuid`` (fixed, as devstack's ``CINDER_CEPH_UUID``).
CEPH_SECRET_UUID = 'c5fd1d3e-7f5b-4f8e-9d2a-5b0f0ce4f0d1'
#: The directories bound over the machine's, under STATE/libvirt.
BOUND = (('etc', '/etc/libvirt'), ('run', '/run/libvirt'),
         ('lib', '/var/lib/libvirt'), ('log', '/var/log/libvirt'),
         ('cache', '/var/cache/libvirt'))
QEMU_CONF = '''# The box's qemu driver: no systemd, no cgroups, TCG guests.
security_driver = "none"
cgroup_controllers = [ ]
namespaces = [ ]
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
stdio_handler = "file"
'''
LIBVIRTD_CONF = '''# The box's libvirtd: the local socket only.
listen_tls = 0
listen_tcp = 0
unix_sock_group = "root"
unix_sock_rw_perms = "0700"
log_outputs = "3:stderr"
'''


def uses_libvirt(info):
    """Whether a stack with settings *info* runs Nova's libvirt driver."""
    return bool(info.get('nova')) and info.get('virt') == 'libvirt'


def process_name(host):
    """The libvirtd process of compute *host*: ``libvirtd``, ``libvirtd-2``."""
    return 'libvirtd' + computes.suffix(host)


class Libvirt(base.Service):

    name = 'libvirtd'

    def enabled(self, info):
        return uses_libvirt(info)

    def processes(self, info):
        return [process_name(h) for h in computes.compute_hosts(info)]

    def known_processes(self):
        return [process_name(h) for h in computes.compute_hosts(
            {'computes': computes.MAX_COMPUTES})]

    @staticmethod
    def directory(ctx, host=computes.COMPUTE_HOST):
        return os.path.join(ctx.dir, 'libvirt' + computes.suffix(host))

    def uri(self, ctx, host=computes.COMPUTE_HOST):
        """The connection URI of *host*'s libvirtd (Nova, virsh)."""
        return 'qemu+unix:///system?socket=%s' % os.path.join(
            self.directory(ctx, host), 'run', 'libvirt-sock')

    def virsh(self, ctx, *args, check=True, host=computes.COMPUTE_HOST):
        """Run ``virsh`` on *host*'s libvirtd; its CompletedProcess."""
        res = subprocess.run(['virsh', '-c', self.uri(ctx, host)] +
                             list(args), capture_output=True, text=True,
                             timeout=120)
        if check and res.returncode:
            raise base.StackError('virsh %s failed (%d): %s' % (
                ' '.join(args[:2]), res.returncode, res.stderr.strip()))
        return res

    def write_conf(self, ctx):
        for host in computes.compute_hosts(ctx.info):
            d = self.directory(ctx, host)
            for sub, _target in BOUND:
                os.makedirs(os.path.join(d, sub), mode=0o700, exist_ok=True)
            for name, text in (('libvirtd.conf', LIBVIRTD_CONF),
                               ('qemu.conf', QEMU_CONF)):
                with open(os.path.join(d, 'etc', name), 'w') as f:
                    f.write(text)

    def argv(self, ctx, host=computes.COMPUTE_HOST):
        """*host*'s libvirtd: its own directories and hostname."""
        d = self.directory(ctx, host)
        binds = ' && '.join('mount --bind %s %s' % (
            os.path.join(d, sub), target) for sub, target in BOUND)
        return ['unshare', '--mount', '--propagation', 'private', '--uts',
                'sh', '-c',
                'echo %s > /proc/sys/kernel/hostname && mkdir -p %s && %s '
                '&& exec "$@"' % (host, ' '.join(t for _s, t in BOUND),
                                  binds),
                'sh', boxutil.which('libvirtd'), '--pid-file',
                os.path.join(d, 'run', 'libvirtd.pid')]

    def start(self, ctx):
        self.write_conf(ctx)
        for host in computes.compute_hosts(ctx.info):
            proc = ctx.proc(process_name(host))
            if not proc.alive():
                proc.start(self.argv(ctx, host))
        for host in computes.compute_hosts(ctx.info):
            boxutil.wait_for(lambda: self.host_ready(ctx, host),
                             ctx.s.timeout, process_name(host),
                             ctx.proc(process_name(host)))

    def ready(self, ctx):
        return all(self.host_ready(ctx, h)
                   for h in computes.compute_hosts(ctx.info))

    def host_ready(self, ctx, host):
        if not os.path.exists(os.path.join(self.directory(ctx, host), 'run',
                                           'libvirt-sock')):
            return False
        return self.virsh(ctx, 'version', check=False,
                          host=host).returncode == 0

    def ensure_ceph_secret(self, ctx, user, keyring_path):
        """The libvirt secret qemu's librbd authenticates with, everywhere.

        The key goes from the keyring file to each libvirtd through a
        private temporary file (``secret-set-value --file``): never an
        argument.
        """
        key = ceph_dev.keyring_key(keyring_path)
        if not key:
            raise base.StackError('no key in %s' % keyring_path)
        for host in computes.compute_hosts(ctx.info):
            with tempfile.NamedTemporaryFile('w', suffix='.xml') as xml:
                xml.write("<secret ephemeral='no' private='no'><uuid>%s"
                          "</uuid><usage type='ceph'><name>client.%s secret"
                          "</name></usage></secret>" % (CEPH_SECRET_UUID,
                                                        user))
                xml.flush()
                self.virsh(ctx, 'secret-define', xml.name, host=host)
            with tempfile.NamedTemporaryFile(
                    'w', dir=self.directory(ctx, host)) as f:
                f.write(key)
                f.flush()
                # The file holds the key as the keyring has it: base64.
                self.virsh(ctx, 'secret-set-value', CEPH_SECRET_UUID,
                           '--file', f.name, host=host)

    def domains(self, ctx, host=computes.COMPUTE_HOST):
        """Names of the running domains of *host*'s libvirtd."""
        res = self.virsh(ctx, 'list', '--name', check=False, host=host)
        return [n for n in res.stdout.split() if n] if not res.returncode \
            else []

    def stop_process(self, ctx, proc):
        # Guests outlive libvirtd: stop them first (Nova's compute is
        # already stopped; its database forgets nothing it needs).
        host = computes.host_of(proc.name, self.name)
        if proc.alive():
            for name in self.domains(ctx, host):
                self.virsh(ctx, 'destroy', name, check=False, host=host)
        super(Libvirt, self).stop_process(ctx, proc)

    def detail(self, ctx, name):
        host = computes.host_of(name, self.name)
        ok = self.host_ready(ctx, host)
        return '%s, %d guest(s) running' % (
            self.uri(ctx, host), len(self.domains(ctx, host)) if ok else 0), ok

    def ready_lines(self, ctx):
        return ['  %-10s %s, pid %s (host %s: qemu TCG guests; virsh -c '
                'URI)' % (process_name(h), self.uri(ctx, h),
                          ctx.proc(process_name(h)).pid, h)
                for h in computes.compute_hosts(ctx.info)]
