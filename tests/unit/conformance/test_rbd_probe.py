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

"""RBDProbe without Ceph: its clients' parameters, its verdicts."""

from unittest import mock

import fixtures
import testtools

from cinder_forcedetach.conformance import probe
from cinder_forcedetach.conformance import rbd_probe

# A stand-in for the librbd client: the same line protocol, no Ceph.
FAKE_CLIENT = r'''
import json, sys
p = json.loads(sys.argv[1])
print('READY', p['ready'], flush=True)
for line in sys.stdin:
    words = line.split()
    if words == ['close']:
        break
    if words[0] == 'write':
        if words[2] == '167':
            print('FAILED', words[1], 108, 'ConnectionShutdown', flush=True)
        elif words[2] != '0':
            print('WROTE', words[1], flush=True)
print('CLOSED', flush=True)
'''


class Conf(object):
    def __init__(self, **values):
        self.values = values

    def safe_get(self, name):
        return self.values.get(name)


class Driver(object):
    def __init__(self, **values):
        self.configuration = Conf(**values)


class Vol(object):
    name = 'volume-1'


class FakeLiveClient(object):
    made = []

    def __init__(self, params, bind_ip=None, shim=None, timeout=30):
        self.params, self.bind_ip, self.shim = params, bind_ip, shim
        self.addr = '%s:0/42' % (bind_ip or '127.0.0.1')
        self.asked = self.waited = False
        FakeLiveClient.made.append(self)

    def ask_close(self):
        self.asked = True

    def write(self, offset, byte, timeout):
        self.wrote = (offset, byte, timeout)
        return {0xa7: False, 0: None}.get(byte, True)

    def kill(self):
        self.killed = True

    def wait_closed(self, timeout=10):
        self.waited = True


INFO = {'name': 'volumes/volume-1', 'hosts': ['127.0.0.1', '::1'],
        'ports': ['6789', '3300'], 'auth_username': 'cinder',
        'cluster_name': 'ceph', 'auth_enabled': True}


class RBDProbeTestCase(testtools.TestCase):

    def setUp(self):
        super(RBDProbeTestCase, self).setUp()
        for var in (rbd_probe.SHIM_ENV, rbd_probe.KEYRING_ENV):
            self.useFixture(fixtures.EnvironmentVariable(var))
        FakeLiveClient.made = []
        self.useFixture(fixtures.MockPatchObject(rbd_probe, 'LiveClient',
                                                 FakeLiveClient))

    def test_is_an_access_probe(self):
        self.assertIsInstance(
            probe.load('cinder_forcedetach.conformance.rbd_probe.RBDProbe'),
            probe.AccessProbe)

    def test_base_hooks_are_no_ops(self):
        base = probe.FCArrayProbe()
        self.assertIsNone(base.connect(None, Vol(), {}, {}))
        self.assertIsNone(base.disconnect_all())
        # R8's block I/O: a probe without clients has none.
        self.assertRaises(NotImplementedError, base.write_block, None,
                          Vol(), {}, 0, 1)
        self.assertRaises(NotImplementedError, base.read_block, None,
                          Vol(), {}, 0)

    def test_write_block_through_the_host_s_client(self):
        p = rbd_probe.RBDProbe()
        p.connect(Driver(), Vol(), {'host': 'h1', 'ip': '127.0.0.11'}, INFO)
        p.connect(Driver(), Vol(), {'host': 'h2', 'ip': '127.0.0.12'}, INFO)
        h1, h2 = FakeLiveClient.made
        self.assertTrue(p.write_block(Driver(), Vol(), {'host': 'h2'},
                                      4096, 0xb2))
        self.assertEqual((4096, 0xb2, 20), h2.wrote)
        self.assertFalse(p.write_block(Driver(), Vol(), {'host': 'h1'},
                                       8192, 0xa7))
        self.assertIsNone(p.write_block(Driver(), Vol(), {'host': 'h3'},
                                        0, 1))
        # No answer: stopped at once, and no longer the probe's.
        self.assertIsNone(p.write_block(Driver(), Vol(), {'host': 'h1'},
                                        0, 0))
        self.assertTrue(h1.killed)
        self.assertEqual([h2], p.clients)

    def test_connect_from_connection_info(self):
        p = rbd_probe.RBDProbe()
        p.bind_shim = '/tmp/shim.so'
        driver = Driver(forcedetach_rbd_keyring='/etc/ceph/k',
                        rbd_keyring_conf='/etc/ceph/other')
        addr = p.connect(driver, Vol(), {'host': 'h1', 'ip': '127.0.0.11'},
                         {'driver_volume_type': 'rbd', 'data': INFO})
        client, = FakeLiveClient.made
        self.assertEqual('127.0.0.11:0/42', addr)
        self.assertEqual(('127.0.0.11', '/tmp/shim.so'),
                         (client.bind_ip, client.shim))
        self.assertEqual({'mon_host': '127.0.0.1:6789,[::1]:3300',
                          'user': 'cinder', 'cluster': 'ceph',
                          'keyring': '/etc/ceph/k', 'pool': 'volumes',
                          'image': 'volume-1', 'timeout': 20},
                         client.params)
        # Cinder's stored form: the data keys flattened.
        p.connect(Driver(rbd_keyring_conf='/etc/ceph/other'), Vol(),
                  {'ip': '127.0.0.12'}, dict(INFO, ports=None))
        self.assertEqual(('127.0.0.1,::1', '/etc/ceph/other'),
                         (FakeLiveClient.made[1].params['mon_host'],
                          FakeLiveClient.made[1].params['keyring']))

    def test_keyring_and_shim_from_the_environment(self):
        self.useFixture(fixtures.EnvironmentVariable(rbd_probe.SHIM_ENV,
                                                     '/s.so'))
        self.useFixture(fixtures.EnvironmentVariable(rbd_probe.KEYRING_ENV,
                                                     '/k'))
        p = rbd_probe.RBDProbe()
        p.connect(Driver(forcedetach_rbd_keyring='/other'), Vol(),
                  {'ip': '127.0.0.11'}, INFO)
        self.assertEqual(('/s.so', '/k'), (FakeLiveClient.made[0].shim,
                                           FakeLiveClient.made[0].params[
                                               'keyring']))

    def test_client_at_another_address_fails_and_is_stopped_later(self):
        p = rbd_probe.RBDProbe()

        def make(*args, **kwargs):
            client = mock.Mock(addr='127.0.0.1:0/7')
            FakeLiveClient.made.append(client)
            return client
        self.useFixture(fixtures.MockPatchObject(rbd_probe, 'LiveClient',
                                                 make))
        err = self.assertRaises(rbd_probe.ProbeError, p.connect, Driver(),
                                Vol(), {'host': 'h2', 'ip': '127.0.0.12'},
                                INFO)
        self.assertIn('talks to Ceph from 127.0.0.1:0/7, not from its '
                      'connector\'s ip 127.0.0.12', str(err))
        p.disconnect_all()
        FakeLiveClient.made[0].ask_close.assert_called_once_with()
        FakeLiveClient.made[0].wait_closed.assert_called_once_with(mock.ANY)
        self.assertEqual([], p.clients)

    def test_cluster_access_from_the_driver_configuration(self):
        p = rbd_probe.RBDProbe()
        access = p._access(Driver(rbd_user='cinder',
                                  rbd_keyring_conf='/etc/ceph/k'))
        # '' is librados' default search path (None would read no file).
        self.assertEqual(('ceph', '', 'cinder', '/etc/ceph/k', 20),
                         tuple(access))
        access = p._access(Driver(rbd_ceph_conf='/c.conf',
                                  rbd_cluster_name='east'))
        self.assertEqual(('east', '/c.conf'), (access.name, access.conf))

    def test_connection_info_without_image(self):
        self.assertRaises(rbd_probe.ProbeError, rbd_probe.RBDProbe().connect,
                          Driver(), Vol(), {'ip': '127.0.0.11'},
                          {'hosts': ['127.0.0.1']})

    def test_disconnect_all_is_idempotent(self):
        p = rbd_probe.RBDProbe()
        p.connect(Driver(), Vol(), {'ip': '127.0.0.11'}, INFO)
        p.connect(Driver(), Vol(), {'ip': '127.0.0.12'}, INFO)
        p.disconnect_all()
        p.disconnect_all()
        self.assertTrue(all(c.asked and c.waited
                            for c in FakeLiveClient.made))

    def test_verdicts_from_the_live_holders(self):
        p = rbd_probe.RBDProbe()
        holders = {'127.0.0.11:0/1'}
        self.useFixture(fixtures.MockPatchObject(
            p, 'live_holders', lambda driver, volume: set(holders)))
        self.assertTrue(p.exported(Driver(), Vol()))
        self.assertTrue(p.host_has_access(Driver(), Vol(),
                                          {'ip': '127.0.0.11'}))
        self.assertFalse(p.host_has_access(Driver(), Vol(),
                                           {'ip': '127.0.0.12'}))
        # Hostile fields are not addresses: no access, nothing resolved.
        self.assertFalse(p.host_has_access(Driver(), Vol(), {'ip': 'ALL'}))
        self.assertFalse(p.host_has_access(Driver(), Vol(), None))
        holders.clear()
        self.assertFalse(p.exported(Driver(), Vol()))

    def test_blocklisted(self):
        blocklist = {'127.0.0.11:0/1', '127.0.0.13:0/0'}
        self.assertTrue(rbd_probe._blocklisted('127.0.0.11:0/1', blocklist))
        self.assertFalse(rbd_probe._blocklisted('127.0.0.11:0/2', blocklist))
        self.assertTrue(rbd_probe._blocklisted('127.0.0.13:0/9', blocklist))
        self.assertTrue(rbd_probe._blocklisted('[::1]:0/3', {'[::1]:0/0'}))


class LiveClientTestCase(testtools.TestCase):
    """The client process protocol, on a stand-in script."""

    def test_ready_then_close(self):
        self.useFixture(fixtures.MockPatchObject(rbd_probe, 'CLIENT',
                                                 FAKE_CLIENT))
        client = rbd_probe.LiveClient({'ready': 'v1:127.0.0.11:0/5',
                                       'image': 'volume-1'}, timeout=20)
        self.assertEqual('127.0.0.11:0/5', client.addr)
        client.ask_close()
        client.wait_closed(10)
        self.assertEqual(0, client.proc.returncode)
        self.assertEqual(['CLOSED'], client.lines[-1])

    def test_write_protocol(self):
        self.useFixture(fixtures.MockPatchObject(rbd_probe, 'CLIENT',
                                                 FAKE_CLIENT))
        client = rbd_probe.LiveClient({'ready': 'v1:127.0.0.11:0/5',
                                       'image': 'volume-1'}, timeout=20)
        self.addCleanup(client.kill)
        self.assertTrue(client.write(4096, 0xb2, 10))
        self.assertFalse(client.write(8192, 0xa7, 10))
        self.assertEqual(['FAILED', '8192', '108', 'ConnectionShutdown'],
                         client.lines[-1])
        # An answer is the one after the request, never an older line.
        self.assertIsNone(client.write(0, 0, 0.5))
        self.assertTrue(client.write(4096, 0xb2, 10))
        client.ask_close()
        client.wait_closed(10)
        self.assertIsNone(client.write(4096, 0xb2, 10))

    def test_no_ready_line(self):
        self.useFixture(fixtures.MockPatchObject(
            rbd_probe, 'CLIENT', 'import sys; sys.stderr.write("nope")'))
        err = self.assertRaises(rbd_probe.ProbeError, rbd_probe.LiveClient,
                                {'image': 'volume-1'}, timeout=20)
        self.assertIn('did not open it', str(err))
        self.assertIn('nope', str(err))
