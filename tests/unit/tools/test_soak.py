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

"""The soak's pieces that need no box (tests/support/soak.py, its tool).

tools/ is not a package: the script is loaded from its path.
"""

import argparse
import importlib.util
import io
import json
import os
from unittest import mock

import fixtures
import testtools

from tests.support import cluster
from tests.support import soak

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
PATH = os.path.join(REPO, 'tools', 'soak.py')


def load():
    spec = importlib.util.spec_from_file_location('soak_under_test', PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class SoakTestCase(testtools.TestCase):

    def setUp(self):
        super(SoakTestCase, self).setUp()
        self.soak = soak

    def test_a_slot_is_a_hosts_only_when_it_holds_its_whole_pattern(self):
        block, first = self.soak.BLOCK, self.soak.FIRST_SLOT
        pattern = self.soak.PATTERNS
        data = bytearray((first + 4) * block)
        data[first * block:(first + 1) * block] = bytes(
            [pattern['soak-h2']]) * block
        # Torn: half a host's pattern.
        data[(first + 1) * block:(first + 1) * block + 512] = bytes(
            [pattern['soak-h1']]) * 512
        data[(first + 3) * block:(first + 4) * block] = bytes(
            [pattern['soak-h4']]) * block
        self.assertEqual({first: 'soak-h2', first + 3: 'soak-h4'},
                         self.soak.landed_slots(bytes(data), 4))
        # Slots beyond the data read (a short file): none.
        self.assertEqual({first: 'soak-h2', first + 3: 'soak-h4'},
                         self.soak.landed_slots(bytes(data), 9))

    def test_hosts_have_distinct_patterns_none_zero(self):
        patterns = list(self.soak.PATTERNS.values())
        self.assertEqual(len(patterns), len(set(patterns)))
        self.assertNotIn(0, patterns)

    def test_faults_need_a_history(self):
        tool = load()
        self.useFixture(fixtures.MockPatch('sys.stderr', io.StringIO()))
        with mock.patch.object(tool.tc, 'ClusterBox') as box:
            self.assertRaises(SystemExit, tool.main, ['--faults'])
        box.assert_not_called()


class FakeBox(object):
    """The box's API as the soak calls it; each call answers *answer*."""

    def __init__(self, live, answer=None):
        self.live = live
        self.answer = answer
        self.calls = []

    def attachments(self, vol_id):
        return [{'id': att_id} for att_id in self.live]

    def api(self, method, path, body=None, **kwargs):
        self.calls.append((method, path, body))
        if self.answer is not None:
            raise self.answer


def api_error(status, message):
    return cluster.ApiError(status, json.dumps(
        {'computeFault': {'code': status, 'message': message}}))


class ClassifyTestCase(testtools.TestCase):
    """Which errors of a run are correct answers, which are failures."""

    def run_once(self, box, name, multiattach=False):
        run = soak.Soak(box, argparse.Namespace(seed=1, history=None))
        run.volumes = {'v1': multiattach}
        run.hosts = {'a1': 'soak-h1', 'a2': 'soak-h2'}
        self.useFixture(fixtures.MockPatch('sys.stdout', io.StringIO()))
        run.one(name)
        return run

    def test_an_attach_ended_meanwhile_is_an_answer(self):
        box = FakeBox([], api_error(500, 'Unable to create attachment for '
                                    'volume (Volume attachment could not be '
                                    'found with filter: attachment_id = x.)'))
        run = self.run_once(box, 'attach')
        self.assertEqual(0, run.http500)
        self.assertEqual({'attach 500 refused': 1}, dict(run.errors))

    def test_any_other_500_is_a_failure(self):
        box = FakeBox([], api_error(500, 'Unable to create attachment for '
                                    'volume (DBDeadlock).'))
        self.assertEqual(1, self.run_once(box, 'attach').http500)

    def test_force_detach_names_the_host_among_several(self):
        box = FakeBox(['a1', 'a2'])
        self.run_once(box, 'force_detach_api', multiattach=True)
        body = box.calls[0][2]['os-force_detach']
        self.assertIn(body['attachment_id'], ('a1', 'a2'))
        self.assertEqual(cluster.connector(
            {'a1': 'soak-h1', 'a2': 'soak-h2'}[body['attachment_id']]),
            body['connector'])

    def test_no_connector_refused_on_a_multiattach_volume(self):
        """An attach raced the listing: our driver will not guess."""
        refusal = api_error(500, 'Unable to terminate volume connection '
                            'from backend.')
        box = FakeBox(['a1'], refusal)
        run = self.run_once(box, 'force_detach_api', multiattach=True)
        self.assertEqual({}, box.calls[0][2]['os-force_detach'])
        self.assertEqual(0, run.http500)
        # The same answer on a volume that is not multiattach: a failure.
        run = self.run_once(FakeBox(['a1'], refusal), 'force_detach_api')
        self.assertEqual(1, run.http500)


class EtcdLeaderDownTestCase(testtools.TestCase):
    """The etcd leader's kill -9 and restart, as a fault of the history."""

    def setUp(self):
        super(EtcdLeaderDownTestCase, self).setUp()
        self.useFixture(fixtures.MockPatch('tests.support.soak.time.sleep'))
        self.box = mock.Mock()
        self.kill = self.box.kill
        self.run = soak.Soak(self.box, argparse.Namespace(
            seed=1, history='h.jsonl'))

    def test_the_leader_is_killed_restarted_and_recorded(self):
        self.box.etcd_leader.return_value = 'etcd-2'
        self.run.etcd_leader_down()
        self.kill.assert_called_once_with('etcd-2')
        self.box.up.assert_called_once_with()
        (fault,) = [e for e in self.run.history.events
                    if e['type'] == 'fault']
        self.assertEqual(('etcd leader kill -9', 'etcd-2', True),
                         (fault['kind'], fault['member'], fault['fired']))
        self.assertEqual([(fault['start'], fault['end'])],
                         self.run.fault_windows)
        self.assertFalse(self.run.crashing.locked())

    def test_no_leader_no_fault(self):
        self.box.etcd_leader.return_value = None
        self.run.etcd_leader_down()
        self.kill.assert_not_called()
        self.assertEqual([], self.run.fault_windows)

    def test_one_fault_at_a_time(self):
        self.box.etcd_leader.return_value = 'etcd-2'
        with self.run.crashing:
            self.run.etcd_leader_down()
        self.kill.assert_not_called()


class PartitionTestCase(testtools.TestCase):
    """A volume service cut off and healed, as a fault of the history."""

    def setUp(self):
        super(PartitionTestCase, self).setUp()
        self.sleep = self.useFixture(fixtures.MockPatch(
            'tests.support.soak.time.sleep')).mock
        self.box = mock.Mock()
        self.box.volume_services.return_value = ['cinder-volume-1',
                                                 'cinder-volume-2']
        self.heal = self.box.cut.return_value
        self.run = soak.Soak(self.box, argparse.Namespace(
            seed=1, history='h.jsonl'))

    def test_cut_held_healed_and_recorded(self):
        self.run.partition()
        ((name, *cut), _kw) = self.box.cut.call_args
        self.assertIn(name, self.box.volume_services.return_value)
        self.assertIn(tuple(cut), soak.CUTS)
        (held,), _kw = self.sleep.call_args
        self.assertTrue(soak.CUT_SECONDS[0] <= held <= soak.CUT_SECONDS[1])
        self.heal.assert_called_once_with()
        (fault,) = [e for e in self.run.history.events
                    if e['type'] == 'fault']
        self.assertEqual(('partition', name, '+'.join(cut), True),
                         (fault['kind'], fault['service'], fault['cut'],
                          fault['fired']))
        self.assertEqual([(fault['start'], fault['end'])],
                         self.run.fault_windows)
        self.assertFalse(self.run.crashing.locked())

    def test_healed_when_the_hold_is_interrupted(self):
        self.sleep.side_effect = KeyboardInterrupt
        self.assertRaises(KeyboardInterrupt, self.run.partition)
        self.heal.assert_called_once_with()
        self.assertFalse(self.run.crashing.locked())

    def test_one_fault_at_a_time(self):
        with self.run.crashing:
            self.run.partition()
        self.box.cut.assert_not_called()


class RunAgainTestCase(testtools.TestCase):
    """A force-detach a fault made fail is run again once it is over."""

    def run_once(self, name, answer, in_fault):
        box = FakeBox(['a1'], answer)
        box.manage = mock.Mock(return_value=mock.Mock(returncode=0))
        run = soak.Soak(box, argparse.Namespace(seed=1, history=None))
        run.volumes = {'v1': False}
        run.hosts = {'a1': 'soak-h1'}
        if in_fault:
            run.fault_windows.append((0.0, float('inf')))
        self.useFixture(fixtures.MockPatch('sys.stdout', io.StringIO()))
        run.one(name)
        return run, box

    def test_api_500_during_a_fault_runs_again(self):
        run, box = self.run_once('force_detach_api',
                                 api_error(500, 'LockLost'), in_fault=True)
        box.manage.assert_called_once_with('volume', 'force-detach', 'v1',
                                           '--all-hosts')
        self.assertEqual((0, {'force_detach_api 500 during a fault': 1}),
                         (run.http500, dict(run.errors)))

    def test_cli_failure_during_a_fault_runs_again(self):
        box = FakeBox(['a1'])
        box.manage = mock.Mock(side_effect=[
            mock.Mock(returncode=1, stderr='LockLost'),
            mock.Mock(returncode=0)])
        run = soak.Soak(box, argparse.Namespace(seed=1, history=None))
        run.volumes, run.hosts = {'v1': False}, {'a1': 'soak-h1'}
        run.fault_windows.append((0.0, float('inf')))
        self.useFixture(fixtures.MockPatch('sys.stdout', io.StringIO()))
        run.one('force_detach_cli')
        self.assertEqual([mock.call('volume', 'force-detach', 'v1'),
                          mock.call('volume', 'force-detach', 'v1',
                                    '--all-hosts')],
                         box.manage.call_args_list)
        self.assertEqual({'force_detach_cli exit 1': 1}, dict(run.errors))

    def test_the_host_named_is_the_host_run_again(self):
        box = FakeBox(['a1', 'a2'], api_error(500, 'LockLost'))
        box.manage = mock.Mock(return_value=mock.Mock(returncode=0))
        run = soak.Soak(box, argparse.Namespace(seed=1, history=None))
        run.volumes = {'v1': True}
        run.hosts = {'a1': 'soak-h1', 'a2': 'soak-h2'}
        run.fault_windows.append((0.0, float('inf')))
        self.useFixture(fixtures.MockPatch('sys.stdout', io.StringIO()))
        run.one('force_detach_api')
        body = box.calls[0][2]['os-force_detach']
        box.manage.assert_called_once_with(
            'volume', 'force-detach', 'v1', '--attachment',
            body['attachment_id'], '--connector',
            json.dumps(body['connector']))

    def test_a_force_detach_that_never_ran_is_not_run_again(self):
        box = FakeBox(['a1'])
        box.attachments = mock.Mock(side_effect=api_error(500, 'gone'))
        box.manage = mock.Mock()
        run = soak.Soak(box, argparse.Namespace(seed=1, history=None))
        run.volumes, run.hosts = {'v1': False}, {'a1': 'soak-h1'}
        run.fault_windows.append((0.0, float('inf')))
        self.useFixture(fixtures.MockPatch('sys.stdout', io.StringIO()))
        run.one('force_detach_api')
        box.manage.assert_not_called()
        self.assertEqual([], box.calls)
        self.assertEqual({'force_detach_api 500 during a fault': 1},
                         dict(run.errors))

    def test_no_fault_no_rerun(self):
        run, box = self.run_once('force_detach_api',
                                 api_error(500, 'LockLost'), in_fault=False)
        box.manage.assert_not_called()
        self.assertEqual(1, run.http500)

    def test_an_attach_failed_in_a_fault_is_not_run_again(self):
        run, box = self.run_once('attach', api_error(500, 'LockLost'),
                                 in_fault=True)
        box.manage.assert_not_called()
        self.assertEqual({'attach 500 during a fault': 1}, dict(run.errors))
