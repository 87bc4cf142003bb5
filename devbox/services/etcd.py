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

"""etcd (``--coordination etcd``): the tooz locks of Cinder's services.

A project-started single-member etcd, data under ``STATE/etcd``; a dead
holder's lock expires after :data:`LOCK_TTL` seconds.
"""

import json
import os
import urllib.error
import urllib.request

from devbox import boxutil
from devbox.services import base

#: Seconds until etcd frees the lock of a volume service that died.
LOCK_TTL = 10


class Etcd(base.Service):

    name = 'etcd'

    def enabled(self, info):
        return info.get('coordination') == 'etcd'

    def ports(self, info):
        return {'etcd': [info['etcd_port'], info['etcd_port'] + 1]}

    @staticmethod
    def url(info):
        return base.url(info, 'etcd_port')

    def coordination_url(self, ctx):
        """tooz's backend URL: this etcd, or lock files without it."""
        if not self.enabled(ctx.info):
            return 'file://%s' % os.path.join(ctx.dir, 'locks')
        # A lock whose holder died (kill -9) expires after LOCK_TTL s.
        return 'etcd3+%s?timeout=%d' % (self.url(ctx.info), LOCK_TTL)

    def ready(self, ctx):
        try:
            with urllib.request.urlopen(self.url(ctx.info) + '/health',
                                        timeout=2) as resp:
                return json.loads(resp.read()).get('health') == 'true'
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def start(self, ctx):
        proc = ctx.proc(self.name)
        if proc.alive():
            return
        etcd = boxutil.which('etcd')
        if not etcd:
            raise base.StackError('etcd not found: install etcd-server '
                                  '(tools/install-deps.sh does)')
        info, client = ctx.info, self.url(ctx.info)
        peer = 'http://%s:%d' % (info['host'], info['etcd_port'] + 1)
        proc.start([etcd, '--name', 'box',
                    '--data-dir', os.path.join(ctx.dir, 'etcd'),
                    '--listen-client-urls', client,
                    '--advertise-client-urls', client,
                    '--listen-peer-urls', peer,
                    '--initial-advertise-peer-urls', peer,
                    '--initial-cluster', 'box=' + peer,
                    '--initial-cluster-state', 'new'])
        boxutil.wait_for(lambda: self.ready(ctx), ctx.s.timeout, 'etcd', proc)

    def detail(self, ctx, name):
        ok = self.ready(ctx)
        return '%s %s' % (self.url(ctx.info), 'healthy' if ok else
                          'NOT healthy'), ok

    def ready_lines(self, ctx):
        return ['  etcd       %s, pid %s (tooz locks)' % (
            self.url(ctx.info), ctx.proc(self.name).pid)]
