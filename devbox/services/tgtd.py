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

"""tgtd, the box's iSCSI target (userspace).

``tgtd -f -C CONTROL --iscsi portal=HOST:PORT``.  tgtd ignores SIGTERM:
``down`` deletes its targets and accounts, then stops it with ``tgtadm
--op delete --mode system``.
"""

import os
import re
import shutil
import subprocess
import time

from devbox import boxutil
from devbox import process
from devbox.services import base

SOCKET_DIR = '/var/run/tgtd'


def tgtadm(control, *args, check=True):
    return subprocess.run(('tgtadm', '-C', str(control), '--lld', 'iscsi') +
                          args, capture_output=True, text=True, check=check,
                          timeout=30)


def target_ids(control):
    out = tgtadm(control, '--op', 'show', '--mode', 'target',
                 check=False).stdout
    return re.findall(r'^Target (\d+):', out, re.MULTILINE)


class Tgtd(base.Service):

    name = 'tgtd'

    def ports(self, info):
        return {'tgtd': [info['iscsi_port']]}

    def ready(self, ctx):
        return boxutil.port_open(ctx.info['host'], ctx.info['iscsi_port']) \
            and tgtadm(ctx.info['tgt_control_port'], '--op', 'show',
                       '--mode', 'target', check=False).returncode == 0

    def start(self, ctx):
        info, proc = ctx.info, ctx.proc(self.name)
        if proc.alive():
            return
        control = info['tgt_control_port']
        if os.path.exists(os.path.join(SOCKET_DIR, 'socket.%d' % control)) \
                and tgtadm(control, '--op', 'show', '--mode', 'target',
                           check=False).returncode == 0:
            raise base.StackError('a tgtd this tool did not start already '
                                  'uses control port %d; set '
                                  'STACK_TGT_CONTROL_PORT' % control)
        if not shutil.which('tgtd'):
            raise base.StackError('tgtd not found: install tgt')
        proc.start(['tgtd', '-f', '-C', str(control), '--iscsi',
                    'portal=%s:%d' % (info['host'], info['iscsi_port'])])
        boxutil.wait_for(lambda: self.ready(ctx), 30, 'tgtd', proc)

    def stop_process(self, ctx, proc):
        if not proc.alive():
            proc.forget()
            return
        control = ctx.info.get('tgt_control_port', ctx.s.tgt_control_port)
        for tid in target_ids(control):
            tgtadm(control, '--op', 'delete', '--mode', 'target', '--tid',
                   tid, '--force', check=False)
        accounts = tgtadm(control, '--op', 'show', '--mode', 'account',
                          check=False).stdout
        for line in accounts.splitlines()[1:]:
            if line.strip():
                tgtadm(control, '--op', 'delete', '--mode', 'account',
                       '--user', line.split()[0], check=False)
        tgtadm(control, '--op', 'delete', '--mode', 'system', check=False)
        pid, start = proc.record['pid'], proc.record['start_time']
        for _ in range(100):
            if not process.is_alive(pid, start):
                break
            time.sleep(0.1)
        if process.is_alive(pid, start):
            boxutil.log('tgtd did not stop; SIGKILL %d' % pid)
            proc.stop(grace=0)
        proc.forget()

    def detail(self, ctx, name):
        info = ctx.info
        return 'portal %s:%d, %d target(s)' % (
            info['host'], info['iscsi_port'],
            len(target_ids(info['tgt_control_port']))), True

    def ready_lines(self, ctx):
        info = ctx.info
        return ['  tgtd       iSCSI portal %s:%d, control port %d, pid %s' % (
            info['host'], info['iscsi_port'], info['tgt_control_port'],
            ctx.proc(self.name).pid)]
