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

"""A box process cut off from chosen services, on the shared loopback.

A compute host is a node of its own (:mod:`devbox.netns`).  A volume
service cannot be moved into a network namespace on these machines:
``tgtadm`` reaches tgtd through an abstract unix socket, which belongs to
one network namespace, and the box's Ceph monitors bind 127.0.0.1.  So a
service is cut the way a partition cuts it, where it stands: it runs in a
cgroup-v2 group of its own (from its start: :func:`joiner`), and iptables
drops every TCP packet that group sends to the cut services' ports (the
``cgroup`` match).  Nothing is refused: its connections and new connects
hang, as across a partition, while every other process reaches those
services.
Healing deletes the rules; TCP retransmits and the connections go on.
One direction is dropped (the service's packets); with no packet of its
getting through, no TCP exchange completes either way.
"""

import os
import subprocess

from devbox import process

#: Where this module mounts a cgroup-v2 hierarchy when none is mounted.
OWN_MOUNT = '/run/cinder-forcedetach-cgroup2'


def cgroup2_root(mount=True):
    """The mount point of the cgroup-v2 hierarchy.

    Mounted if missing, unless *mount* is false (then None).
    """
    with open('/proc/mounts') as f:
        for line in f:
            fields = line.split()
            if len(fields) > 2 and fields[2] == 'cgroup2':
                return fields[1]
    if not mount:
        return None
    os.makedirs(OWN_MOUNT, exist_ok=True)
    subprocess.run(['mount', '-t', 'cgroup2', 'none', OWN_MOUNT],
                   check=True, capture_output=True)
    return OWN_MOUNT


def group_dir(tag, name):
    """The directory of group *name* of set *tag* (made if missing)."""
    path = os.path.join(cgroup2_root(), 'cfd-%s' % tag, name)
    os.makedirs(path, exist_ok=True)
    return path


def joiner(path):
    """A ``preexec_fn`` that puts the new process into the group *path*.

    A socket is classified by the group its process was in when it made
    the socket: a service must be in its group from its start, before its
    first connection, or a cut would miss the connections it keeps open.
    """
    procs = os.path.join(path, 'cgroup.procs')

    def join():
        with open(procs, 'w') as f:
            f.write(str(os.getpid()))
    return join


def remove_groups(tag):
    """Remove the set's empty groups (a group with members stays)."""
    root = cgroup2_root(mount=False)
    base = root and os.path.join(root, 'cfd-%s' % tag)
    if not base or not os.path.isdir(base):
        return
    for name in os.listdir(base):
        if os.path.isdir(os.path.join(base, name)):
            try:
                os.rmdir(os.path.join(base, name))
            except OSError:
                pass        # still has members
    try:
        os.rmdir(base)
    except OSError:
        pass


def drop_rule(group, port, comment):
    """iptables' arguments after -I/-D OUTPUT: *group*'s packets to *port*."""
    return ['-m', 'cgroup', '--path', group, '-p', 'tcp', '--dport',
            str(port), '-m', 'comment', '--comment', comment, '-j', 'DROP']


class Partitions(object):
    """Groups of box processes, each cut from chosen ports or healed.

    *tag* names this set's cgroups and rules (``cfd-<tag>``): several
    sets (two test runs) never touch each other's.
    """

    def __init__(self, tag, iptables='iptables'):
        self.name = tag
        self.tag = 'cfd-%s' % tag
        self.iptables = iptables
        self.root = cgroup2_root()
        self.cuts = {}          # group name -> [port]
        self.placed = set()     # groups place() made

    def group(self, name):
        """The group's path below the cgroup-v2 root."""
        return '%s/%s' % (self.tag, name)

    def place(self, name, pid):
        """Put *pid* and the processes below it into group *name*.

        Children forked later (a worker, a privsep daemon) are born in it;
        sockets made before stay outside (see :func:`joiner`).
        """
        path = group_dir(self.name, name)
        self.placed.add(name)
        for member in [pid] + [p for p, _start in process.descendants(pid)]:
            try:
                with open(os.path.join(path, 'cgroup.procs'), 'w') as f:
                    f.write(str(member))
            except (ProcessLookupError, FileNotFoundError):
                pass        # ended meanwhile

    def cut(self, name, ports):
        """Drop what group *name* sends to *ports* (added to earlier cuts)."""
        for port in ports:
            if port in self.cuts.get(name, ()):
                continue
            self._iptables('-I', self.group(name), port)
            self.cuts.setdefault(name, []).append(port)

    def heal(self, name):
        """Let group *name*'s packets through again."""
        for port in self.cuts.pop(name, []):
            self._iptables('-D', self.group(name), port)

    def close(self):
        """Heal every cut, empty what :meth:`place` filled, remove groups.

        A group that still has members (a box service's) stays.
        """
        for name in list(self.cuts):
            self.heal(name)
        for name in sorted(self.placed):
            path = os.path.join(self.root, self.group(name))
            if not os.path.isdir(path):
                continue
            with open(os.path.join(path, 'cgroup.procs')) as f:
                members = f.read().split()
            for member in members:
                try:
                    with open(os.path.join(self.root, 'cgroup.procs'),
                              'w') as f:
                        f.write(member)
                except ProcessLookupError:
                    pass
        self.placed.clear()
        remove_groups(self.name)

    def _iptables(self, op, group, port):
        res = subprocess.run([self.iptables, '-w', op, 'OUTPUT'] +
                             drop_rule(group, port, self.tag),
                             capture_output=True, text=True)
        if res.returncode:
            raise RuntimeError('iptables %s OUTPUT (group %s, port %s) '
                               'failed: %s' % (op, group, port,
                                               res.stderr.strip()))
