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

"""A process cut off one port on loopback, and healed (devbox.partitions).

Real cgroup-v2 group, real iptables rule, a real listener: a process of
the group cannot reach the port (its connect hangs: nothing refuses it),
another process can, and once healed the group's process connects again.
The cluster box's partition tests stand on this.
"""

import os
import socket
import subprocess
import sys
import threading

import testtools

from devbox import partitions

#: A process that tries to connect to the port in argv[1] once a line
#: arrives on its stdin, and prints what happened.
CLIENT = '''
import socket, sys
port = int(sys.argv[1])
for line in sys.stdin:
    c = socket.socket()
    c.settimeout(1.5)
    try:
        c.connect(("127.0.0.1", port))
        print("connected", flush=True)
    except OSError as err:
        print(type(err).__name__, flush=True)
    finally:
        c.close()
'''


#: A process that connects to the port in argv[1] at once, then sends a
#: byte on that connection for each line on its stdin and prints whether
#: the echo came back.
HOLDER = '''
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
c.settimeout(1.5)
print("connected", flush=True)
for line in sys.stdin:
    try:
        c.sendall(b"x")
        print("echo" if c.recv(1) == b"x" else "closed", flush=True)
    except OSError as err:
        print(type(err).__name__, flush=True)
'''


class PartitionTestCase(testtools.TestCase):

    def setUp(self):
        super(PartitionTestCase, self).setUp()
        self.listener = socket.socket()
        self.addCleanup(self.listener.close)
        self.listener.bind(('127.0.0.1', 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.parts = partitions.Partitions('test-%d' % os.getpid())
        self.addCleanup(self.parts.close)

    def client(self):
        proc = subprocess.Popen([sys.executable, '-c', CLIENT,
                                 str(self.port)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        self.addCleanup(proc.wait)
        self.addCleanup(proc.stdin.close)
        return proc

    @staticmethod
    def try_connect(proc):
        proc.stdin.write('go\n')
        proc.stdin.flush()
        return proc.stdout.readline().strip()

    def test_cut_hangs_the_group_only_and_heals(self):
        cut, other = self.client(), self.client()
        self.assertEqual('connected', self.try_connect(cut))   # control
        self.parts.place('svc', cut.pid)
        self.parts.cut('svc', [self.port])
        self.assertEqual('TimeoutError', self.try_connect(cut))
        self.assertEqual('connected', self.try_connect(other))
        self.parts.heal('svc')
        self.assertEqual('connected', self.try_connect(cut))

    def echo_server(self):
        def serve():
            conn, _addr = self.listener.accept()
            with conn:
                while True:
                    data = conn.recv(1)
                    if not data:
                        return
                    conn.sendall(data)
        thread = threading.Thread(target=serve, daemon=True)
        thread.start()

    def test_started_in_its_group_its_open_connection_is_cut_too(self):
        """A box service is in its group from its start (joiner).

        A socket is classified by its process's group when it was made: a
        connection the service opened before the cut is cut too.
        """
        self.echo_server()
        proc = subprocess.Popen(
            [sys.executable, '-c', HOLDER, str(self.port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            preexec_fn=partitions.joiner(partitions.group_dir(
                self.parts.name, 'svc')))
        self.addCleanup(proc.wait)
        self.addCleanup(proc.stdin.close)
        self.assertEqual('connected', proc.stdout.readline().strip())
        self.assertEqual('echo', self.try_connect(proc))     # control
        self.parts.cut('svc', [self.port])
        self.assertEqual('TimeoutError', self.try_connect(proc))

    def test_close_leaves_no_rule_and_no_group(self):
        proc = self.client()
        self.parts.place('svc', proc.pid)
        self.parts.cut('svc', [self.port])
        self.parts.close()
        rules = subprocess.run(['iptables', '-w', '-S', 'OUTPUT'],
                               capture_output=True, text=True).stdout
        self.assertNotIn(self.parts.tag, rules)
        self.assertFalse(os.path.exists(os.path.join(self.parts.root,
                                                     self.parts.tag)))
        self.assertEqual('connected', self.try_connect(proc))
