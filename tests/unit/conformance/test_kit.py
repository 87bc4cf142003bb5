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

import testtools

from cinder_forcedetach.conformance import harness
from cinder_forcedetach.conformance import probe
from cinder_forcedetach.conformance import runner
from cinder_forcedetach.conformance import suite
from cinder_forcedetach.drivers import iscsi
from cinder_forcedetach.targets import base as target_base

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
        p = probe.TgtProbe()
        state = target_base.TargetState(tid=1, name='iqn.x:volume-1',
                                        acls=['iqn.a'])
        state.sessions.append(target_base.Session(1, 'iqn.b', [1]))
        driver = FakeDriver(state)
        self.assertTrue(p.exported(driver, Vol()))
        self.assertTrue(p.host_has_access(driver, Vol(), {'initiator':
                                                          'iqn.a'}))
        self.assertTrue(p.host_has_access(driver, Vol(), {'initiator':
                                                          'iqn.b'}))
        self.assertFalse(p.host_has_access(driver, Vol(), {'initiator':
                                                           'iqn.c'}))
        state.address_acls.append('ALL')
        self.assertTrue(p.host_has_access(driver, Vol(), {'initiator':
                                                          'iqn.c'}))
        self.assertFalse(p.exported(FakeDriver(None), Vol()))

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
        self.assertEqual(18, len(names))
        self.assertEqual(set(suite.RULES), {suite.rule_of(n)[0]
                                            for n in names})

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
