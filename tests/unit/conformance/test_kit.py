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

"""Unit tests of the conformance kit's pieces (no Cinder services)."""

import os
import signal
import tempfile
import time

import fixtures
import testtools

from cinder_forcedetach.conformance import __main__ as kit_main
from cinder_forcedetach.conformance import harness
from cinder_forcedetach.conformance import initiator
from cinder_forcedetach.conformance import probe
from cinder_forcedetach.conformance import runner
from cinder_forcedetach.conformance import suite
from cinder_forcedetach.drivers import iscsi

TGT = 'cinder_forcedetach.drivers.iscsi.TgtISCSIDriver'


class CapabilitiesTestCase(testtools.TestCase):

    def test_parse_string(self):
        self.assertEqual({'multiattach': True, 'fencing': False,
                          'protocol': 'fc'},
                         harness.parse_capabilities(
                             'multiattach, no-fencing,protocol=FC'))

    def test_parse_set_and_dict(self):
        self.assertEqual({'protocol': 'rbd', 'fencing': True},
                         harness.parse_capabilities({'ceph', 'fencing'}))
        self.assertEqual({'protocol': 'iscsi'},
                         harness.parse_capabilities({'protocol': 'iSCSI'}))

    def test_unknown_capability(self):
        self.assertRaises(ValueError, harness.parse_capabilities, 'teleport')

    def test_derived_from_the_driver_class(self):
        caps = harness.Target(TGT).capabilities()
        self.assertEqual({'protocol': 'iscsi', 'fencing': False}, caps)

        class Fencing(iscsi.TgtISCSIDriver):
            def fence_clients(self, volume, connectors, keep_attachments):
                return []
        caps = harness.Target(Fencing).capabilities()
        self.assertTrue(caps['fencing'])

    def test_declared_wins(self):
        caps = harness.Target(TGT, capabilities='fencing,fc').capabilities()
        self.assertEqual({'protocol': 'fc', 'fencing': True}, caps)

    def test_class_attribute(self):
        class Declared(object):
            protocol = 'iSCSI'
            conformance_capabilities = {'multiattach', 'fencing'}
        caps = harness.Target(Declared).capabilities()
        self.assertEqual({'protocol': 'iscsi', 'fencing': True,
                          'multiattach': True}, caps)

    def test_storage_protocol_constant(self):
        class Ceph(object):
            STORAGE_PROTOCOL = 'ceph'

            def fence_clients(self, volume, connectors, keep_attachments):
                return []
        self.assertEqual({'protocol': 'rbd', 'fencing': True},
                         harness.Target(Ceph).capabilities())

    def test_default_connectors(self):
        rbd = [harness.default_connector(h, 'rbd')['ip']
               for h in (suite.HOST1, suite.HOST2, 'other')]
        self.assertEqual(['127.0.0.11', '127.0.0.12', '127.0.0.1'], rbd)
        self.assertEqual('127.0.0.1',
                         harness.default_connector(suite.HOST2, 'fc')['ip'])
        fc = harness.default_connector('h1', 'fc')
        self.assertEqual(2, len(fc['wwpns']))
        self.assertTrue(all(len(w) == 16 for w in fc['wwpns']))
        self.assertIn('iqn.', harness.default_connector('h1',
                                                        'iscsi')['initiator'])


class FromConfigTestCase(testtools.TestCase):

    def write(self, text):
        fd, path = tempfile.mkstemp(suffix='.conf')
        os.write(fd, text.encode())
        os.close(fd)
        self.addCleanup(os.unlink, path)
        return path

    def test_section_options(self):
        path = self.write('[DEFAULT]\nenabled_backends = b1\n\n[b1]\n'
                          'volume_driver = %s\nTarget_Port = 3261\n'
                          'san_password = %%secret\n' % TGT)
        target = harness.Target.from_config(path, 'b1', probe='x.Y')
        self.assertEqual(TGT, target.driver)
        self.assertEqual({'volume_driver': TGT, 'Target_Port': '3261',
                          'san_password': '%secret',
                          'volume_backend_name': 'b1'}, target.options)
        self.assertEqual('b1', str(target))

    def test_driver_argument_wins(self):
        path = self.write('[b1]\nvolume_driver = a.B\n')
        target = harness.Target.from_config(path, 'b1', driver=TGT)
        self.assertEqual(TGT, target.driver_path)

    def test_errors(self):
        path = self.write('[b1]\nfoo = 1\n')
        self.assertRaises(ValueError, harness.Target.from_config, path, 'b2')
        self.assertRaises(ValueError, harness.Target.from_config, path, 'b1')
        self.assertRaises(ValueError, harness.Target.from_config,
                          path + '.missing', 'b1')

    def test_register_options(self):
        target = harness.Target(TGT, {'forcedetach_tgt_control_port': '9',
                                      'target_port': '3261',
                                      'volume_driver': TGT,
                                      'no_such_option': 'x'})
        flags = target.register_options()
        self.assertEqual({'v': '9', 'g': harness.BACKEND},
                         flags['forcedetach_tgt_control_port'])
        self.assertIn('target_port', flags)
        self.assertNotIn('volume_driver', flags)
        self.assertEqual(['no_such_option'], target.ignored_options)


class FakeTarget(object):
    def __init__(self, state):
        self.state = state

    def find(self, name):
        return self.state if name == 'iqn.x:volume-1' else None


class FakeDriver(object):
    def __init__(self, state=None, maps=None, hosts=None):
        self.target = FakeTarget(state)
        self.array = self
        self.maps = maps or {}
        self.hosts = hosts or {}

    def target_name(self, volume):
        return 'iqn.x:' + volume.name

    def hosts_of_volume(self, name):
        return self.maps.get(name, {})

    def host_wwpns(self, host):
        return self.hosts[host]


class Vol(object):
    name = 'volume-1'


class ProbeTestCase(testtools.TestCase):

    def test_tgt(self):
        # The probe reads tgtd's listing itself (test_tgt_probe has real
        # ones), not the driver's target: FakeTarget is not asked.
        listing = ['Target 1: iqn.x:volume-1',
                   '    I_T nexus information:',
                   '        I_T nexus: 1',
                   '            Initiator: iqn.b alias: none',
                   '    ACL information:',
                   '        iqn.a']
        self.useFixture(fixtures.MockPatchObject(
            probe.TgtProbe, 'listing', lambda _self, driver: '\n'.join(
                listing)))
        p = probe.TgtProbe()
        driver = FakeDriver(None)
        self.assertTrue(p.exported(driver, Vol()))
        self.assertTrue(p.host_has_access(driver, Vol(), {'initiator':
                                                          'iqn.a'}))
        self.assertTrue(p.host_has_access(driver, Vol(), {'initiator':
                                                          'iqn.b'}))
        self.assertFalse(p.host_has_access(driver, Vol(), {'initiator':
                                                           'iqn.c'}))
        listing.append('        ALL')
        self.assertTrue(p.host_has_access(driver, Vol(), {'initiator':
                                                          'iqn.c'}))
        del listing[:]
        self.assertFalse(p.exported(driver, Vol()))

    def test_fc(self):
        p = probe.FCArrayProbe()
        driver = FakeDriver(maps={'volume-1': {'h1': 1}},
                            hosts={'h1': ['5001438012345678']})
        self.assertTrue(p.exported(driver, Vol()))
        self.assertTrue(p.host_has_access(driver, Vol(), {
            'wwpns': ['50:01:43:80:12:34:56:78']}))
        self.assertFalse(p.host_has_access(driver, Vol(), {
            'wwpns': ['5001438012345679', 'ALL']}))
        self.assertFalse(p.host_has_access(driver, Vol(), {'wwpns': 'x'}))
        self.assertFalse(p.exported(FakeDriver(), Vol()))

    def test_load(self):
        self.assertIsInstance(
            probe.load('cinder_forcedetach.conformance.probe.TgtProbe'),
            probe.TgtProbe)
        self.assertRaises(TypeError, probe.load, object())
        self.assertRaises(ValueError, probe.load_class, 'NoModule')


class FakeInitiator(object):
    """QemuIoInitiator's interface; *answers*: what each write returns."""

    made = []

    def __init__(self, portal, iqn, initiator, username=None, password=None,
                 lun=1):
        self.args = (portal, iqn, initiator, username, password, lun)
        self.opened = None if initiator == 'iqn.refused' else 'qemu-io> '
        self.output = b'Failed to log in to target'
        self.answers = [True]
        self.writes, self.closed = [], False
        FakeInitiator.made.append(self)

    def write(self, pattern, offset=0, length=4096, timeout=5):
        self.writes.append((pattern, offset, length, timeout))
        return self.answers.pop(0) if self.answers else True

    def read_bytes(self, offset=0, length=4096, timeout=5):
        return bytes([offset // length]) * length

    def close(self):
        self.closed = True


class Vol1(object):
    name = 'volume-1'


TGT_INFO = {'driver_volume_type': 'iscsi', 'data': {
    'target_portal': '127.0.0.1:3260', 'target_iqn': 'iqn.x:volume-1',
    'target_lun': 1, 'auth_username': 'u', 'auth_password': 'p'}}


class TgtLiveInitiatorTestCase(testtools.TestCase):
    """TgtProbe's live sessions, on a stand-in initiator."""

    def setUp(self):
        super(TgtLiveInitiatorTestCase, self).setUp()
        FakeInitiator.made = []
        self.useFixture(fixtures.MockPatchObject(
            initiator, 'QemuIoInitiator', FakeInitiator))
        self.probe = probe.TgtProbe()

    def connector(self, host, iqn=None):
        return {'host': host, 'initiator': iqn or 'iqn.x:' + host}

    def test_connect_logs_in_and_writes(self):
        self.assertEqual('iqn.x:volume-1', self.probe.connect(
            None, Vol1(), self.connector('h1'), TGT_INFO))
        client, = FakeInitiator.made
        self.assertEqual(('127.0.0.1:3260', 'iqn.x:volume-1', 'iqn.x:h1',
                          'u', 'p', 1), client.args)
        self.assertEqual([(0x5a, 0, probe.BLOCK, 6)], client.writes)
        # Cinder's stored form: the data keys flattened.
        self.probe.connect(None, Vol1(), self.connector('h2'),
                           TGT_INFO['data'])
        self.assertEqual(2, len(self.probe.clients))

    def test_refused_login_or_missing_fields(self):
        err = self.assertRaises(probe.ProbeError, self.probe.connect, None,
                                Vol1(), self.connector('h1', 'iqn.refused'),
                                TGT_INFO)
        self.assertIn('could not log in to iqn.x:volume-1 at '
                      '127.0.0.1:3260: Failed to log in', str(err))
        # Kept, so that disconnect_all stops it.
        self.assertEqual(1, len(self.probe.clients))
        err = self.assertRaises(probe.ProbeError, self.probe.connect, None,
                                Vol1(), self.connector('h1'),
                                {'target_portal': 'p'})
        self.assertIn('has no target_iqn, target_lun', str(err))

    def test_write_and_read_through_the_host_s_session(self):
        self.probe.connect(None, Vol1(), self.connector('h1'), TGT_INFO)
        self.probe.connect(None, Vol1(), self.connector('h2'), TGT_INFO)
        h1, h2 = FakeInitiator.made
        self.assertTrue(self.probe.write_block(None, Vol1(),
                                               self.connector('h2'),
                                               3 * probe.BLOCK, 0xb2))
        self.assertEqual((0xb2, 3 * probe.BLOCK, probe.BLOCK, 3),
                         h2.writes[-1])
        self.assertEqual(b'' * probe.BLOCK, self.probe.read_block(
            None, Vol1(), self.connector('h1'), 2 * probe.BLOCK))
        self.assertIsNone(self.probe.write_block(
            None, Vol1(), self.connector('h3'), 0, 1))

    def test_unanswered_write_stops_the_initiator(self):
        self.probe.connect(None, Vol1(), self.connector('h1'), TGT_INFO)
        client, = FakeInitiator.made
        client.answers = [None]
        self.assertIsNone(self.probe.write_block(
            None, Vol1(), self.connector('h1'), probe.BLOCK, 0xa7))
        self.assertTrue(client.closed)
        self.assertEqual([], self.probe.clients)

    def test_disconnect_all_is_idempotent(self):
        self.probe.connect(None, Vol1(), self.connector('h1'), TGT_INFO)
        self.probe.disconnect_all()
        self.probe.disconnect_all()
        self.assertTrue(FakeInitiator.made[0].closed)
        self.assertEqual([], self.probe.clients)


class ParseDumpTestCase(testtools.TestCase):
    """qemu-io's ``read -v``: the bytes, or None when incomplete."""

    def dump(self, offset, data):
        lines = []
        for i in range(0, len(data), 16):
            chunk = data[i:i + 16]
            lines.append('%08x:  %s  %s' % (
                offset + i, ''.join('%02x ' % b for b in chunk),
                ''.join(chr(b) if 32 <= b < 127 else '.' for b in chunk)))
        return '\n'.join(lines + ['read %d/%d bytes at offset %d' % (
            len(data), len(data), offset), 'qemu-io> '])

    def test_parse(self):
        data = bytes(range(256)) * 2
        self.assertEqual(data, initiator.parse_dump(self.dump(4096, data),
                                                    4096, 512))

    def test_incomplete_or_out_of_place(self):
        data = b'\xa7' * 64
        self.assertIsNone(initiator.parse_dump(self.dump(4096, data), 4096,
                                               128))
        self.assertIsNone(initiator.parse_dump(self.dump(0, data), 4096,
                                               64))
        self.assertIsNone(initiator.parse_dump(None, 0, 64))


class RunInChildTestCase(testtools.TestCase):
    """R5's child: how it ended, never a hang."""

    def test_returned(self):
        self.assertEqual((0, ''), suite.run_in_child(lambda: None))

    def test_raised(self):
        def fail():
            raise ValueError('before the crash')
        code, why = suite.run_in_child(fail)
        self.assertEqual(suite.CHILD_RAISED, code)
        self.assertIn('ValueError: before the crash', why)

    def test_crashed(self):
        self.assertEqual((suite.CRASH_EXIT, ''), suite.run_in_child(
            lambda: os._exit(suite.CRASH_EXIT)))

    def test_state_stays_in_the_child(self):
        seen = []
        suite.run_in_child(lambda: seen.append(1))
        self.assertEqual([], seen)

    def test_hung_child_is_killed(self):
        code, _why = suite.run_in_child(lambda: time.sleep(30), timeout=0.3)
        self.assertEqual(-signal.SIGKILL, code)


class RunnerTestCase(testtools.TestCase):

    def test_rule_of(self):
        self.assertEqual(('R4', 'fault_in_remove_export'), suite.rule_of(
            'x.Conformance_b.test_R4_fault_in_remove_export'))

    def test_every_check_is_named_after_a_rule(self):
        names = [n for n in dir(suite.ConformanceChecks)
                 if n.startswith('test_')]
        self.assertEqual(21, len(names))
        self.assertEqual(set(suite.RULES), {suite.rule_of(n)[0]
                                            for n in names})
        self.assertEqual(['reset_state_then_attach_elsewhere',
                          'status_only_reset_then_attach_elsewhere'],
                         sorted(suite.rule_of(n)[1] for n in names
                                if suite.rule_of(n)[0] == 'R8'))

    def test_help_lists_every_rule(self):
        text = kit_main.rule_list()
        self.assertIn('  R8   no second writer after a reset of the state',
                      text)
        self.assertEqual(len(suite.RULES), len(text.splitlines()) - 1)
        self.assertEqual(['R%d' % n for n in range(1, 10)],
                         [line.split()[0] for line in
                          text.splitlines()[1:]])

    def test_table_and_verdict(self):
        rows = [runner.Row('R1', 'a', runner.PASS),
                runner.Row('R3', 'b', runner.NA, 'n/a (capability: x)')]
        self.assertTrue(runner.passed(rows))
        text = runner.table(rows)
        self.assertIn('| R3 | b | n/a | n/a (capability: x) |', text)
        self.assertIn('2 checks: 1 pass, 0 FAIL, 1 n/a -> CONFORMANT', text)
        rows.append(runner.Row('R2', 'c', runner.FAIL, 'R2 x | y'))
        self.assertFalse(runner.passed(rows))
        self.assertIn('| R2 | c | FAIL | R2 x \\| y |', runner.table(rows))
        self.assertFalse(runner.passed([]))
