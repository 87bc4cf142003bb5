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

A project-started etcd, data under ``STATE/etcd``; a dead holder's lock
expires after :data:`LOCK_TTL` seconds.  One member by default.  With
``--etcd-members 3`` (or 5) a cluster of that many members (``etcd-1``
...), each with its own client and peer port and data directory, and, on
the client port Cinder names, an ``etcd gateway`` (process ``etcd``): tooz's
etcd3gw driver takes one endpoint, and etcd's gateway is the documented way
to give such a client every member (it moves to another member when its
member stops answering).  A member killed and started again rejoins with
its data.
"""

import json
import os
import urllib.error
import urllib.request

from devbox import boxutil
from devbox.services import base

#: Seconds until etcd frees the lock of a volume service that died.
LOCK_TTL = 10
#: Most members ``--etcd-members`` takes.
MAX_MEMBERS = 5


class Etcd(base.Service):

    name = 'etcd'

    def enabled(self, info):
        return info.get('coordination') == 'etcd'

    def processes(self, info):
        return [m for m, _port in members(info)] + [self.name]

    def known_processes(self):
        return ['etcd-%d' % i for i in range(1, MAX_MEMBERS + 1)] + [
            self.name]

    def ports(self, info):
        if not members(info):
            return {'etcd': [info['etcd_port'], info['etcd_port'] + 1]}
        ports = {m: [port, port + 1] for m, port in members(info)}
        ports[self.name] = [info['etcd_port']]
        return ports

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
        return _healthy(self.url(ctx.info))

    def start(self, ctx):
        etcd = boxutil.which('etcd')
        if not etcd:
            raise base.StackError('etcd not found: install etcd-server '
                                  '(tools/install-deps.sh does)')
        info = ctx.info
        cluster = members(info)
        if not cluster:
            self._start_member(ctx, etcd, self.name, 'box',
                               info['etcd_port'], {'box': info['etcd_port']},
                               os.path.join(ctx.dir, 'etcd'))
            return
        started = [
            self._start_member(ctx, etcd, name, name, port, dict(cluster),
                               os.path.join(ctx.dir, 'etcd', name), wait=False)
            for name, port in cluster]
        for proc, url in started:
            if proc is not None:
                boxutil.wait_for(lambda: _healthy(url), ctx.s.timeout,
                                 proc.name, proc)
        gateway = ctx.proc(self.name)
        if not gateway.alive():
            gateway.start([etcd, 'gateway', 'start', '--listen-addr',
                           '%s:%d' % (info['host'], info['etcd_port']),
                           '--endpoints', ','.join(
                               '%s:%d' % (info['host'], port)
                               for _name, port in cluster)])
        boxutil.wait_for(lambda: self.ready(ctx), ctx.s.timeout, 'etcd',
                         gateway)

    @staticmethod
    def _start_member(ctx, etcd, proc_name, member, port, cluster, data_dir,
                      wait=True):
        """Start one member unless it runs; (its Proc or None, its URL)."""
        host = ctx.info['host']
        client = 'http://%s:%d' % (host, port)
        proc = ctx.proc(proc_name)
        if proc.alive():
            return None, client
        peer = 'http://%s:%d' % (host, port + 1)
        proc.start([etcd, '--name', member, '--data-dir', data_dir,
                    '--listen-client-urls', client,
                    '--advertise-client-urls', client,
                    '--listen-peer-urls', peer,
                    '--initial-advertise-peer-urls', peer,
                    '--initial-cluster', ','.join(
                        '%s=http://%s:%d' % (name, host, p + 1)
                        for name, p in sorted(cluster.items())),
                    '--initial-cluster-state', 'new'])
        if wait:
            boxutil.wait_for(lambda: _healthy(client), ctx.s.timeout,
                             proc_name, proc)
        return proc, client

    def detail(self, ctx, name):
        if name == self.name:
            ok = self.ready(ctx)
            return '%s %s' % (self.url(ctx.info), 'healthy' if ok else
                              'NOT healthy'), ok
        url = 'http://%s:%d' % (ctx.info['host'],
                                dict(members(ctx.info))[name])
        ok = _healthy(url)
        return '%s %s' % (url, 'healthy' if ok else 'NOT healthy'), ok

    def ready_lines(self, ctx):
        cluster = members(ctx.info)
        return ['  etcd       %s, pid %s (tooz locks%s)' % (
            self.url(ctx.info), ctx.proc(self.name).pid,
            '; a gateway to %d members' % len(cluster) if cluster else '')]


def members(info):
    """[(process name, client port)] of a cluster's members; [] for one."""
    ports = info.get('etcd_member_ports') or []
    return [('etcd-%d' % (i + 1), port) for i, port in enumerate(ports)]


def _healthy(url):
    try:
        with urllib.request.urlopen(url + '/health', timeout=2) as resp:
            return json.loads(resp.read()).get('health') == 'true'
    except (urllib.error.URLError, OSError, ValueError):
        return False
