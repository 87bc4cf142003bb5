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

"""devbox.netns on real namespaces: addresses, a silent partition, heal.

Real ``ip netns`` namespaces, veth pairs and a bridge (these machines
allow them; a few hundred milliseconds); a listener on one node and a
client on another, each a process of its own in its node's namespace.
"""

import os
import subprocess
import sys

import testtools

from devbox import netns

LISTEN = '''
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], 7000))
s.listen()
print('listening', flush=True)
while True:
    s.accept()[0].close()
'''
CONNECT = '''
import socket, sys
try:
    socket.create_connection((sys.argv[1], 7000), timeout=1.5).close()
except OSError as err:
    sys.exit(type(err).__name__)
'''


class LabTestCase(testtools.TestCase):

    def setUp(self):
        super(LabTestCase, self).setUp()
        self.lab = netns.Lab()
        self.addCleanup(self.lab.close)
        self.server = self.lab.add('server')
        self.client = self.lab.add('client')
        self.listener = subprocess.Popen(
            self.lab.prefix('server') + [sys.executable, '-c', LISTEN,
                                         self.server.address],
            stdout=subprocess.PIPE, text=True)
        self.addCleanup(self._stop_listener)
        self.assertEqual('listening\n', self.listener.stdout.readline())

    def _stop_listener(self):
        self.listener.kill()
        self.listener.wait()
        self.listener.stdout.close()

    def connect(self):
        """'' when the client node connects, else the error's name."""
        res = subprocess.run(
            self.lab.prefix('client') + [sys.executable, '-c', CONNECT,
                                         self.server.address],
            capture_output=True, text=True, timeout=30)
        return res.stderr.strip().splitlines()[-1] if res.returncode else ''

    def test_nodes_have_their_own_addresses(self):
        self.assertEqual(['198.51.100.10', '198.51.100.11'],
                         [self.server.address, self.client.address])
        out = netns.ip('-n', self.client.netns, '-o', '-4', 'address',
                       'show', 'dev', netns.NODE_LINK)
        self.assertIn('198.51.100.11/24', out)
        self.assertEqual('', self.connect())

    def test_a_partition_is_silent_and_heals(self):
        self.lab.partition('client')
        self.assertTrue(self.lab.partitioned('client'))
        # No answer at all (a refusal would be ConnectionRefusedError).
        self.assertEqual('TimeoutError', self.connect())
        self.lab.heal('client')
        self.assertFalse(self.lab.partitioned('client'))
        self.assertEqual('', self.connect())

    def test_close_removes_every_namespace(self):
        names = [self.lab.switch, self.server.netns, self.client.netns]
        self._stop_listener()
        self.lab.close()
        listed = netns.ip('netns', 'list').split()
        self.assertEqual([], [n for n in names if n in listed])
        self.lab.close()        # again: nothing left, no error

    def test_a_node_name_is_taken_once(self):
        self.assertRaises(ValueError, self.lab.add, 'client')


class StaleTestCase(testtools.TestCase):
    """A killed run's lab goes when the next lab starts; a live one stays."""

    def test_only_a_dead_process_namespaces_go(self):
        child = subprocess.Popen(['true'])
        child.wait()
        dead = 'cfd%d-1-switch' % child.pid
        live = 'cfd%d-999-switch' % os.getpid()
        for name in (dead, live):
            netns.ip('netns', 'add', name)
            self.addCleanup(self._delete, name)
        lab = netns.Lab()
        self.addCleanup(lab.close)
        names = netns.namespaces()
        self.assertNotIn(dead, names)
        self.assertIn(live, names)
        self.assertIn(lab.switch, names)

    @staticmethod
    def _delete(name):
        if name in netns.namespaces():
            netns.ip('netns', 'delete', name)
