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

"""The box's processes: started in their own sessions, recorded by pid.

Standard library only: ``down`` and ``status`` work whatever state the
venv is in.  A record keeps the kernel's start time with the pid, so a
recycled pid is never signalled.
"""

import json
import os
import signal
import subprocess
import time

from devbox import boxutil

#: Seconds between SIGTERM and SIGKILL.
STOP_GRACE = 20.0


def proc_stat(pid):
    """(state, ppid, start time, session id) of *pid* from /proc, or None."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            data = f.read()
    except (OSError, ValueError):
        return None
    fields = data[data.rfind(')') + 2:].split()
    return fields[0], int(fields[1]), int(fields[19]), int(fields[3])


def all_stats():
    stats = {}
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            st = proc_stat(int(entry))
            if st:
                stats[int(entry)] = st
    return stats


def descendants(pid):
    """(pid, start time) of every live process *pid* started.

    Its descendants, and the members of the session it leads (every
    process here starts in a session of its own): a daemon that
    double-forked away from its parent, like oslo.privsep's helper, keeps
    the session.
    """
    stats = all_stats()
    kids = {}
    for child, st in stats.items():
        kids.setdefault(st[1], []).append(child)
    found, seen = [], {pid}
    todo = list(kids.get(pid, [])) + [p for p, st in stats.items()
                                      if st[3] == pid and p != pid]
    while todo:
        child = todo.pop()
        if child in seen:
            continue
        seen.add(child)
        st = stats.get(child)
        if st and st[0] != 'Z':
            found.append((child, st[2]))
        todo.extend(kids.get(child, []))
    return found


def is_alive(pid, start_time):
    st = proc_stat(pid)
    return bool(st) and st[2] == start_time and st[0] != 'Z'


class Proc(object):
    """A process this tool started, recorded in STATE/run/NAME.json.

    *ctx*: what gives its directories (``run_dir``, ``log_dir``, ``dir``)
    and the ``started`` list of the running ``up``.
    """

    def __init__(self, ctx, name):
        self.ctx = ctx
        self.name = name
        self.path = os.path.join(ctx.run_dir, name + '.json')
        self.out_path = os.path.join(ctx.log_dir, name + '.out')
        self.record = None
        if os.path.exists(self.path):
            with open(self.path) as f:
                self.record = json.load(f)

    @property
    def pid(self):
        return self.record and self.record['pid']

    def alive(self):
        return bool(self.record) and is_alive(self.record['pid'],
                                              self.record['start_time'])

    def start(self, argv, env=None, cwd=None, preexec_fn=None):
        """Start *argv*; *preexec_fn* runs in the child before the exec."""
        with open(self.out_path, 'ab') as out:
            popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
                env=env, cwd=cwd or self.ctx.dir, close_fds=True,
                preexec_fn=preexec_fn)
        st = proc_stat(popen.pid)
        if st is None:
            raise boxutil.StackError('%s exited at once; see %s' % (
                self.name, self.out_path))
        self.record = {'name': self.name, 'pid': popen.pid,
                       'start_time': st[2], 'argv0': argv[0],
                       'started': time.time()}
        with open(self.path + '.tmp', 'w') as f:
            json.dump(self.record, f)
        os.rename(self.path + '.tmp', self.path)
        self.ctx.started.append(self)
        return popen

    def forget(self):
        self.record = None
        if os.path.exists(self.path):
            os.unlink(self.path)

    def stop(self, grace=STOP_GRACE):
        """SIGTERM the recorded process, SIGKILL it and its children later.

        Returns the (pid, start time) pairs that had to be killed.
        """
        if not self.alive():
            self.forget()
            return []
        pid, start = self.record['pid'], self.record['start_time']
        family = [(pid, start)] + descendants(pid)
        self._signal(pid, start, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not any(is_alive(p, s) for p, s in family):
                break
            time.sleep(0.1)
        killed = [(p, s) for p, s in family if is_alive(p, s)]
        for p, s in killed:
            self._signal(p, s, signal.SIGKILL)
        for p, s in killed:
            for _ in range(50):
                if not is_alive(p, s):
                    break
                time.sleep(0.1)
        self.forget()
        return killed

    @staticmethod
    def _signal(pid, start, sig):
        if is_alive(pid, start):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
