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

"""Nodes in network namespaces: each its own address on one switch.

A :class:`Lab` is a set of network namespaces this process creates with
``ip netns add``: a switch (a Linux bridge alone in its namespace) and
nodes, each joined to the switch by a veth pair and given its own address
on :data:`SUBNET`.  A process runs on a node under ``ip netns exec``
(:meth:`Lab.prefix`).  A **partition** takes a node's port out of the
bridge: the node stays alive, its links stay up and its processes run, but
its packets reach no one and no one's reach it, silently, as when a switch
port or a cable fails (no error a client could take for a clean close).
:meth:`Lab.heal` puts the port back; TCP connections that have not timed
out resume.

Nothing is routed to or from the root namespace, which holds this
machine's real network: a process outside the lab reaches a node only
through files (unix sockets, the volumes' backing files).
"""

import ipaddress
import itertools
import os
import re
import subprocess

#: Addresses of the lab's nodes (TEST-NET-2): only inside our namespaces.
SUBNET = ipaddress.ip_network('198.51.100.0/24')
#: The first node's host number in :data:`SUBNET`.
FIRST_HOST = 10
BRIDGE = 'br0'
_LABS = itertools.count(1)
_DEFAULT_NAME = re.compile(r'^cfd(\d+)-\d+-')
#: A node's end of its veth pair.
NODE_LINK = 'eth0'


def ip(*args):
    """``ip`` with *args*; its stderr in the error when it fails."""
    res = subprocess.run(('ip',) + args, capture_output=True, text=True,
                         timeout=30)
    if res.returncode:
        raise RuntimeError('ip %s: %s' % (' '.join(args),
                                          res.stderr.strip()))
    return res.stdout


def namespaces():
    """The names of this machine's named network namespaces."""
    return [line.split()[0] for line in ip('netns', 'list').splitlines()
            if line.strip()]


def remove_stale():
    """Delete the namespaces of labs whose process is gone (killed runs).

    A lab's default names start ``cfd<pid>-``; a process killed before
    :meth:`Lab.close` leaves them.  Only those of a pid that no longer
    runs go.
    """
    for name in namespaces():
        match = _DEFAULT_NAME.match(name)
        if match and not os.path.exists('/proc/%s' % match.group(1)):
            ip('netns', 'delete', name)


class Node(object):
    """A node of a lab: its namespace, its address, its switch port."""

    def __init__(self, name, netns, address, port):
        self.name = name
        self.netns = netns
        self.address = address
        self.port = port

    def __repr__(self):
        return 'Node(%s, %s)' % (self.name, self.address)


class Lab(object):
    """A switch and its nodes; :meth:`close` removes every namespace.

    *tag* prefixes the namespaces' names (default: ``cfd<pid>-<n>``, the
    *n*-th lab of this process), so that two labs of one machine never
    share a name; a name left by a killed run is taken over.
    """

    def __init__(self, tag=None):
        self.tag = tag or 'cfd%d-%d' % (os.getpid(), next(_LABS))
        remove_stale()
        self.switch = '%s-switch' % self.tag
        self.nodes = {}
        self._created = []
        self._add_netns(self.switch)
        ip('-n', self.switch, 'link', 'add', BRIDGE, 'type', 'bridge')
        ip('-n', self.switch, 'link', 'set', BRIDGE, 'up')

    def _add_netns(self, name):
        if name in namespaces():
            ip('netns', 'delete', name)         # a killed run's
        ip('netns', 'add', name)
        self._created.append(name)
        ip('-n', name, 'link', 'set', 'lo', 'up')

    def add(self, name):
        """Node *name*, new, joined to the switch: its :class:`Node`."""
        if name in self.nodes:
            raise ValueError('node %s exists' % name)
        index = len(self.nodes)
        node = Node(name, '%s-%s' % (self.tag, name),
                    str(SUBNET[FIRST_HOST + index]), 'port%d' % index)
        self._add_netns(node.netns)
        ip('-n', self.switch, 'link', 'add', node.port, 'type', 'veth',
           'peer', 'name', NODE_LINK, 'netns', node.netns)
        ip('-n', self.switch, 'link', 'set', node.port, 'master', BRIDGE,
           'up')
        ip('-n', node.netns, 'address', 'add',
           '%s/%d' % (node.address, SUBNET.prefixlen), 'dev', NODE_LINK)
        ip('-n', node.netns, 'link', 'set', NODE_LINK, 'up')
        self.nodes[name] = node
        return node

    def prefix(self, name):
        """The command prefix that runs a program on node *name*."""
        return ['ip', 'netns', 'exec', self.nodes[name].netns]

    def partition(self, name):
        """Cut node *name* off the switch, silently; it runs on."""
        ip('-n', self.switch, 'link', 'set', self.nodes[name].port,
           'nomaster')

    def heal(self, name):
        """Join node *name* to the switch again."""
        ip('-n', self.switch, 'link', 'set', self.nodes[name].port,
           'master', BRIDGE)

    def partitioned(self, name):
        """Whether node *name*'s port is out of the bridge."""
        return ('master %s' % BRIDGE) not in ip(
            '-n', self.switch, '-o', 'link', 'show', self.nodes[name].port)

    def close(self):
        """Delete every namespace of the lab (the nodes' links go with them).

        Processes still running on a node keep its namespace alive, unnamed:
        their owners stop them (by pid) before or after.
        """
        while self._created:
            name = self._created.pop()
            if name in namespaces():
                ip('netns', 'delete', name)
        self.nodes = {}
