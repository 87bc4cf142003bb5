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

"""tools/run_tempest.py: skips checked per run, class skips counted whole.

tools/ is not a package: the script is loaded from its path.
"""

import importlib.util
import io
import os
from unittest import mock

import fixtures
import testtools

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
PATH = os.path.join(REPO, 'tools', 'run_tempest.py')


def _load():
    spec = importlib.util.spec_from_file_location('run_tempest_under_test',
                                                  PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run_tempest = _load()

BACKUP = 'tempest.api.volume.test_volumes_backup.VolumesBackupsTest'
MULTI = 'tempest.api.volume.admin.test_multi_backend.VolumeMultiBackendTest'
REPL = ('cinder_tempest_plugin.api.volume.admin.test_volume_replication.'
        'VolumeReplicationTest')
SNAP_BACKUP = ('tempest.api.volume.test_volumes_snapshots.'
               'VolumesSnapshotTestJSON.test_snapshot_backup')
LINES = [
    '# comment', '',
    '%s | tgt | tgt run only: no kernel initiator for a backup' % BACKUP,
    '%s | rbd | RBD run only: one RBD backend' % MULTI,
    '%s | both | replication is not configured' % REPL,
    '%s | tgt | tgt run only: a backup' % SNAP_BACKUP,
]

# subunit-trace's lines, as tempest run prints them, and its summary.
OUTPUT = '''\
{0} setUpClass (%(backup)s) ... SKIPPED: Cinder backup feature disabled
{1} setUpClass (%(repl)s) ... SKIPPED: Cinder volume replication is not enabled
{0} %(snap)s ... SKIPPED: Cinder backup feature disabled
{1} tempest.api.volume.test_volumes_get.VolumesGetTest.test_volume_create_get\
_update_delete[id-27fb0e9f-fb64-41dd-8bdb-1ffa762f0d51,smoke] [3.2s] ... ok
{1} tempest.api.volume.test_x.XTest.test_y[id-1] [1.0s] ... FAILED

======
Totals
======
Ran: 10 tests in 20.0 sec.
 - Passed: 6
 - Skipped: 3
 - Expected Fail: 0
 - Unexpected Success: 0
 - Failed: 1
''' % {'backup': BACKUP, 'repl': REPL, 'snap': SNAP_BACKUP}

# tempest run --list-tests: the run's selection, attributes included.
LISTED = [
    BACKUP + '.test_volume_backup_create_get_detailed_list_restore_delete'
    '[id-a66eb488-8ee1-47d4-8e9f-575a095728c6,smoke]',
    BACKUP + '.test_volume_backup_create_get_detailed_list_restore_delete2'
    '[id-2]',
    BACKUP + '.test_bootable_volume_backup_and_restore[id-3]',
    BACKUP + '.test_volume_backup_get[id-4]',
    BACKUP + 'V39Test.test_update_backup[id-5]',
    REPL + '.test_replication_promote[id-6]',
    REPL + '.test_replication_reenable[id-7]',
    SNAP_BACKUP + '[id-8]',
    'tempest.api.volume.test_volumes_get.VolumesGetTest.test_a[id-9]',
]


class ParseSkipsTestCase(testtools.TestCase):

    def test_run_per_line(self):
        skips = run_tempest.parse_skips(LINES)
        self.assertEqual({'tgt'}, skips[BACKUP][0])
        self.assertEqual({'rbd'}, skips[MULTI][0])
        self.assertEqual({'tgt', 'rbd'}, skips[REPL][0])
        self.assertEqual('replication is not configured', skips[REPL][1])
        self.assertEqual(4, len(skips))

    def test_old_format_is_an_error(self):
        e = self.assertRaises(ValueError, run_tempest.parse_skips,
                              ['%s | RBD run only: one backend' % MULTI],
                              'skips.txt')
        self.assertIn('skips.txt:1', str(e))

    def test_a_comma_list_of_runs(self):
        skips = run_tempest.parse_skips(['%s | tgt, libvirt | why' % MULTI])
        self.assertEqual({'tgt', 'libvirt'}, skips[MULTI][0])
        e = self.assertRaises(ValueError, run_tempest.parse_skips,
                              ['%s | tgt,ceph | why' % MULTI])
        self.assertIn("'ceph'", str(e))

    def test_all_is_every_run(self):
        skips = run_tempest.parse_skips(['%s | all | why' % MULTI])
        self.assertEqual({'tgt', 'rbd', 'libvirt'}, skips[MULTI][0])

    def test_unknown_run_is_an_error(self):
        e = self.assertRaises(ValueError, run_tempest.parse_skips,
                              ['%s | ceph | one backend' % MULTI])
        self.assertIn("'ceph'", str(e))

    def test_empty_reason_is_an_error(self):
        self.assertRaises(ValueError, run_tempest.parse_skips,
                          ['%s | rbd | ' % MULTI])

    def test_listed_twice_is_an_error(self):
        self.assertRaises(ValueError, run_tempest.parse_skips,
                          [LINES[2], LINES[2]])

    def test_the_real_file_names_the_run_its_reason_names(self):
        skips = run_tempest.listed_skips()
        self.assertEqual(15, len(skips))
        for test_id, (runs, reason) in skips.items():
            expected = ({'rbd'} if reason.startswith('RBD run only') else
                        {'tgt'} if reason.startswith('tgt run only') else
                        {'tgt', 'rbd', 'libvirt'}
                        if reason.startswith('every run') else
                        {'tgt', 'rbd'})
            self.assertEqual(expected, runs, test_id)


class SkipEventsTestCase(testtools.TestCase):

    def test_tests_and_classes_apart(self):
        tests, classes = run_tempest.skip_events(OUTPUT)
        self.assertEqual({SNAP_BACKUP}, tests)
        self.assertEqual({BACKUP, REPL}, classes)
        self.assertEqual({SNAP_BACKUP, BACKUP, REPL},
                         run_tempest.skipped_ids(OUTPUT))


class UnlistedSkipsTestCase(testtools.TestCase):

    def setUp(self):
        super(UnlistedSkipsTestCase, self).setUp()
        self.skips = run_tempest.parse_skips(LINES)

    def test_listed_for_this_run(self):
        self.assertEqual([], run_tempest.unlisted_skips(
            'tgt', {BACKUP, REPL, SNAP_BACKUP}, self.skips))
        self.assertEqual([], run_tempest.unlisted_skips(
            'rbd', {MULTI, REPL}, self.skips))

    def test_unlisted_skip_fails_the_run(self):
        other = 'tempest.api.volume.test_x.XTest'
        self.assertEqual([(other, 'not listed')], run_tempest.unlisted_skips(
            'rbd', {MULTI, other}, self.skips))

    def test_skip_listed_for_the_other_backend_fails_the_run(self):
        # VolumesBackupsTest is listed for the tgt run: the RBD box has
        # cinder-backup, so its skip there is a regression.
        self.assertEqual(
            [(BACKUP, 'listed for the tgt run only')],
            run_tempest.unlisted_skips('rbd', {BACKUP, MULTI}, self.skips))
        self.assertEqual(
            [(MULTI, 'listed for the rbd run only')],
            run_tempest.unlisted_skips('tgt', {BACKUP, MULTI}, self.skips))


class UnproducedSkipsTestCase(testtools.TestCase):

    def setUp(self):
        super(UnproducedSkipsTestCase, self).setUp()
        self.skips = run_tempest.parse_skips(LINES)

    def test_every_listed_skip_produced(self):
        self.assertEqual([], run_tempest.unproduced_skips(self.skips, {
            'tgt': {BACKUP, REPL, SNAP_BACKUP}, 'rbd': {MULTI, REPL}}))

    def test_listed_skip_no_run_produced_fails(self):
        self.assertEqual(
            [(REPL, 'rbd'), (REPL, 'tgt')],
            run_tempest.unproduced_skips(self.skips, {
                'tgt': {BACKUP, SNAP_BACKUP}, 'rbd': {MULTI}}))

    def test_both_needs_both_runs(self):
        self.assertEqual([(REPL, 'rbd')], run_tempest.unproduced_skips(
            self.skips, {'tgt': {BACKUP, REPL, SNAP_BACKUP},
                         'rbd': {MULTI}}))

    def test_only_the_runs_that_ran_are_checked(self):
        self.assertEqual([], run_tempest.unproduced_skips(
            self.skips, {'rbd': {MULTI, REPL}}))


class ClassSkipCountTestCase(testtools.TestCase):

    def test_class_skip_counts_as_its_tests(self):
        _tests, classes = run_tempest.skip_events(OUTPUT)
        counts = run_tempest.class_test_counts(classes, LISTED)
        # VolumesBackupsV39Test is another class, not one of BACKUP's.
        self.assertEqual({BACKUP: 4, REPL: 2}, counts)
        self.assertEqual((10, 6, 3, 1), run_tempest.summary(OUTPUT))
        # 3 skips (2 classes, 1 test) become 4 + 2 + 1 = 7.
        self.assertEqual((14, 6, 7, 1), run_tempest.count_class_skips(
            run_tempest.summary(OUTPUT), counts))

    def test_class_not_listed_counts_as_one(self):
        counts = run_tempest.class_test_counts({BACKUP}, [])
        self.assertEqual({BACKUP: 1}, counts)
        self.assertEqual((10, 6, 3, 1), run_tempest.count_class_skips(
            (10, 6, 3, 1), counts))

    def test_no_class_skip(self):
        self.assertEqual((10, 6, 3, 1), run_tempest.count_class_skips(
            (10, 6, 3, 1), {}))


class MainTestCase(testtools.TestCase):
    """main(): the closing line, and the listed skips no run made."""

    def _main(self, skipped_by, install_rc=0):
        skips = run_tempest.parse_skips(LINES)
        runs = []

        def run_one(args, backend, state_dir=None):
            runs.append(backend)
            return (100, 90, 10, 0, 60, True, skipped_by[backend])
        out = io.StringIO()
        install = mock.Mock(returncode=install_rc, stderr='')
        with mock.patch.object(run_tempest, 'run_one', run_one), \
                mock.patch.object(run_tempest, 'listed_skips',
                                  return_value=skips), \
                mock.patch.object(run_tempest.subprocess, 'run',
                                  return_value=install) as subprocess_run, \
                mock.patch.object(run_tempest.time, 'monotonic',
                                  side_effect=[100.0, 175.0]), \
                mock.patch('sys.stdout', out):
            rc = run_tempest.main([])
        # The box's install step, once, before the boxes of the runs.
        subprocess_run.assert_called_once_with(
            [run_tempest.STACK_SH, 'install'], capture_output=True,
            text=True)
        self.assertEqual([] if install_rc else ['libvirt', 'rbd', 'tgt'],
                         sorted(runs))
        return rc, out.getvalue().splitlines()

    def test_a_failed_install_runs_no_box(self):
        rc, lines = self._main({}, install_rc=1)
        self.assertEqual(1, rc)
        self.assertEqual(
            ['tempest: FAILED: tools/stack.sh install exited 1'], lines)

    def test_all_listed_skips_made(self):
        # The runs' counts add up; the seconds are the wall time of the
        # three runs side by side (75 s), not their sum (3 x 60 s).
        rc, lines = self._main({'tgt': {BACKUP, REPL, SNAP_BACKUP},
                                'rbd': {MULTI, REPL}, 'libvirt': set()})
        self.assertEqual(0, rc)
        self.assertEqual(
            ['tempest: ran 300, passed 270, skipped 30, failed 0 (75 s)'],
            lines)

    def test_listed_skip_no_run_made_fails_the_run(self):
        rc, lines = self._main({'tgt': {BACKUP, SNAP_BACKUP},
                                'rbd': {MULTI, REPL}, 'libvirt': set()})
        self.assertEqual(1, rc)
        self.assertEqual(
            ['tempest: listed in tools/tempest-skips.txt for the tgt run, '
             'which did not skip it: %s' % REPL,
             'tempest: ran 300, passed 270, skipped 30, failed 0 (75 s)'],
            lines)


class BringUpTest(testtools.TestCase):
    """A box that fails to come up gets one more try, said at the end."""

    def _stack(self, failures):
        """A stand-in ``tools/stack.sh`` whose first *failures* ups fail."""
        tmp = self.useFixture(fixtures.TempDir()).path
        script = os.path.join(tmp, 'stack.sh')
        with open(script, 'w') as f:
            f.write('#!/bin/sh\necho "$1" >> %(d)s/calls\n'
                    'if [ "$1" = up ]; then\n'
                    '  n=$(grep -c up %(d)s/calls)\n'
                    '  [ "$n" -gt %(f)d ] && exit 0\n'
                    '  echo "nova-compute did not report (try $n)" >&2\n'
                    '  exit 3\nfi\n' % {'d': tmp, 'f': failures})
        os.chmod(script, 0o755)
        self.useFixture(fixtures.MockPatchObject(run_tempest, 'STACK_SH',
                                                 script))
        self.useFixture(fixtures.MockPatchObject(run_tempest, 'PROBLEMS',
                                                 []))
        return os.path.join(tmp, 'calls')

    def _calls(self, path):
        with open(path) as f:
            return f.read().split()

    def setUp(self):
        super(BringUpTest, self).setUp()
        self.state = os.path.join(self.useFixture(
            fixtures.TempDir()).path, 'box')
        # Each try's ports: the fresh environment it came up with.
        self.envs = []

        def box_env(state, backend):
            self.envs.append({'STACK_DIR': state,
                              'STACK_API_PORT': str(20000 + len(self.envs))})
            return self.envs[-1]
        self.useFixture(fixtures.MockPatchObject(run_tempest, 'box_env',
                                                 box_env))

    def test_up_at_first_try(self):
        calls = self._stack(0)
        report = []
        self.assertEqual({'STACK_DIR': self.state,
                          'STACK_API_PORT': '20000'},
                         run_tempest.bring_up(self.state, 'tgt', report))
        self.assertEqual(['up'], self._calls(calls))
        self.assertEqual([], report)
        self.assertEqual([], run_tempest.PROBLEMS)

    def test_second_try_after_a_purge_on_fresh_ports_is_said(self):
        calls = self._stack(1)
        report = []
        env = run_tempest.bring_up(self.state, 'tgt', report)
        self.assertEqual('20001', env['STACK_API_PORT'])
        self.assertEqual(2, len(self.envs))
        self.assertTrue(os.path.isdir(self.state))
        self.assertEqual(['up', 'down', 'up'], self._calls(calls))
        self.assertEqual(
            ['tempest[tgt]: the box did not come up (try 1 of 2): '
             'nova-compute did not report (try 1)'], run_tempest.PROBLEMS)
        self.assertEqual(run_tempest.PROBLEMS, report)

    def test_two_failures_fail(self):
        calls = self._stack(2)
        self.assertIsNone(run_tempest.bring_up(self.state, 'rbd', []))
        self.assertEqual(['up', 'down', 'up', 'down'], self._calls(calls))
        self.assertEqual(2, len(run_tempest.PROBLEMS))
        self.assertIn('(try 2 of 2): nova-compute did not report (try 2)',
                      run_tempest.PROBLEMS[1])


class RecordedTimesTestCase(testtools.TestCase):
    """Each test's time recorded from a run balances the next run."""

    OUTPUT = ('{0} a.B.test_x [1.500000s] ... ok\n'
              '{1} c.D.test_z [2.250000s] ... ok\n'
              '{1} c.D.test_w [0.100000s] ... FAILED\n'
              '{0} a.B.test_s ... SKIPPED: no backup\n'
              '{0} setUpClass (x.Y) ... SKIPPED: no backup\n')

    def setUp(self):
        super(RecordedTimesTestCase, self).setUp()
        self.dir = self.useFixture(fixtures.TempDir()).path
        patch = mock.patch.object(run_tempest, 'TIMES',
                                  os.path.join(self.dir, 'times'))
        patch.start()
        self.addCleanup(patch.stop)

    def test_passed_tests_only(self):
        self.assertEqual({'a.B.test_x': 1.5, 'c.D.test_z': 2.25},
                         run_tempest.test_times(self.OUTPUT))

    def test_written_and_read_back(self):
        self.assertEqual({}, run_tempest.read_times('tgt'))
        run_tempest.write_times('tgt', run_tempest.test_times(self.OUTPUT))
        self.assertEqual({'a.B.test_x': 1.5, 'c.D.test_z': 2.25},
                         run_tempest.read_times('tgt'))
        self.assertEqual({}, run_tempest.read_times('rbd'))

    def test_seeded_times_balance_stestr_workers(self):
        """stestr's own scheduler, on the repository the seed made."""
        import re

        from stestr.repository import util
        from stestr import scheduler

        workspace = os.path.join(self.dir, 'ws')
        os.mkdir(workspace)
        listed = ['a.B.test_x[id-1,smoke]', 'a.B.test_y[id-2]',
                  'c.D.test_z[id-3]', 'e.F.test_new[id-4]']
        times = {'a.B.test_x': 10.0, 'a.B.test_y': 5.5, 'c.D.test_z': 12.0,
                 'gone.G.test_old': 3.0}
        venv_bin = os.path.join(REPO, '.venv', 'bin')
        self.assertEqual(3, run_tempest.seed_times(
            workspace, listed, times, dict(os.environ), venv_bin))
        repo = util.get_repo_open(repo_url=workspace)
        self.assertEqual({'a.B.test_x[id-1,smoke]': 10.0,
                          'a.B.test_y[id-2]': 5.5, 'c.D.test_z[id-3]': 12.0},
                         repo.get_test_times(listed)['known'])
        by_class = re.compile(r'([^\.]*\.)*')
        workers = scheduler.partition_tests(
            listed, 2, repo, lambda t: by_class.match(t).group(0))
        # Class a.B (15.5 s) against c.D (12 s); the untimed class dealt.
        self.assertIn(['c.D.test_z[id-3]'], workers)
