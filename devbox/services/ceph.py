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

"""A single-node Ceph for the RBD backends (``tools/ceph-dev.sh``).

Cluster directory ``STATE/ceph``, monitor on the stack's address.  Its
daemons keep their own pid records (:mod:`devbox.ceph_dev`), so the
service has no process of the box's: ``down`` stops it after Cinder's.
"""

import os
import subprocess

from devbox import boxutil
from devbox import ceph_dev
from devbox.services import base

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
INSTALL_CEPH = os.path.join(REPO_ROOT, 'tools', 'install-ceph.sh')
RBD_DRIVER = 'cinder_forcedetach.drivers.rbd.RBDDriver'
# client.cinder may also lift the fences force-detach adds.
CINDER_MON_CAPS = ceph_dev.FENCING_CINDER_MON_CAPS


def uses_ceph(info):
    """Whether a stack with settings *info* has an RBD backend."""
    return any(d == RBD_DRIVER for _n, d in info.get('backends', ()))


class _Started(object):
    """What ``up`` records when it brought the cluster up itself."""
    name = 'ceph'


class Ceph(base.Service):

    name = 'ceph'

    def enabled(self, info):
        return uses_ceph(info)

    def processes(self, info):
        return []

    def known_processes(self):
        return ['ceph']

    @staticmethod
    def directory(ctx):
        return os.path.join(ctx.dir, 'ceph')

    def dev(self, ctx):
        """The stack's cluster (:class:`.ceph_dev.CephDev`)."""
        host = ctx.info.get('host', ctx.s.host)
        port = ctx.info.get('ceph_mon_port', ctx.s.ceph_mon_port)
        return ceph_dev.CephDev(
            self.directory(ctx), mon_addr=host, daemon_addr=host,
            mon_port=port, mon_port_v2=port - 1,
            cinder_mon_caps=CINDER_MON_CAPS)

    def run(self, ctx, *args, check=True, timeout=300):
        """Run tools/ceph-dev.sh on the stack's cluster."""
        try:
            return self.dev(ctx).run(*args, check=check, timeout=timeout)
        except ceph_dev.CephDevError as err:
            raise base.StackError(str(err))

    def settings(self, ctx):
        """CEPH_* paths of the cluster (``ceph-dev.sh env``; no keys)."""
        return ceph_dev.parse_env(self.run(ctx, 'env').stdout)

    def ready(self, ctx):
        return os.path.exists(self.directory(ctx)) and self.run(
            ctx, 'status', check=False).returncode == 0

    def start(self, ctx):
        if os.environ.get('STACK_SKIP_INSTALL', '') != '1':
            res = subprocess.run([INSTALL_CEPH, ctx.info['venv']],
                                 capture_output=True, text=True)
            if res.returncode:
                raise base.StackError(
                    'tools/install-ceph.sh failed (%d): %s' % (
                        res.returncode, res.stderr.strip()[-2000:]))
        was_ready = self.run(ctx, 'status', check=False).returncode == 0
        self.run(ctx, 'up')
        if not was_ready:
            ctx.started.append(_Started())
        boxutil.log('ceph up (cluster %s)' % self.directory(ctx))

    def stop_process(self, ctx, proc):
        self.stop(ctx)

    def stop(self, ctx):
        if os.path.exists(self.directory(ctx)):
            self.run(ctx, 'down', check=False)
            boxutil.log('stopped ceph (cluster %s)' % self.directory(ctx))

    def status(self, ctx):
        ready = self.ready(ctx)
        return [('ceph', ready, None, 'monitor %s:%s, %s' % (
            ctx.info['host'], ctx.info.get('ceph_mon_port'),
            'ready' if ready else 'NOT ready'), ready)]

    def ready_lines(self, ctx):
        return ['  ceph       monitor %s:%d, cluster %s' % (
            ctx.info['host'], ctx.info.get('ceph_mon_port'),
            self.directory(ctx))]
