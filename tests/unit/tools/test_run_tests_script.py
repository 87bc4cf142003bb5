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

"""tools/run-tests.sh: its closing line and exit code hide nothing.

Each test builds a tiny project (its own .stestr.conf, tests/unit,
tests/upstream with one passing test and one expected failure, and
tests/functional), copies the real script into the project's tools/ and
runs it with --no-install: real stestr, real flake8.  RUN_TESTS_SCRIPT
names another script to check instead (e.g. the previous version).
"""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import fixtures
import testtools
from testtools import content

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
SCRIPT = os.environ.get('RUN_TESTS_SCRIPT') or os.path.join(
    REPO, 'tools', 'run-tests.sh')

PASSING = '''
    import testtools


    class PassTestCase(testtools.TestCase):

        def test_pass(self):
            self.assertTrue(True)
'''
SKIPPED = '''
    import testtools


    class SkipTestCase(testtools.TestCase):

        def test_skip(self):
            self.skipTest('no such device here')
'''
FAILING = '''
    import testtools


    class FailTestCase(testtools.TestCase):

        def test_fail(self):
            self.fail('boom\\n' + 'a line of stderr\\n' * 5)
'''
AFTER_TEMPEST_STARTED = '''
    import os
    import time

    import testtools


    class AfterTempestTestCase(testtools.TestCase):

        def test_tempest_started_first(self):
            for _ in range(100):
                if os.path.exists('tempest-started'):
                    break
                time.sleep(0.1)
            self.assertTrue(os.path.exists('tempest-started'))
'''
UPSTREAM = '''
    import testtools


    class UpstreamTestCase(testtools.TestCase):

        def test_pass(self):
            self.assertTrue(True)

        def test_intended_difference(self):
            self.expectFailure('listed', self.assertEqual, 1, 2)
'''
UNEXPECTED_SUCCESS = '''
    import testtools


    class UpstreamTestCase(testtools.TestCase):

        def test_listed_but_passes(self):
            self.expectFailure('listed', self.assertEqual, 1, 1)
'''
BROKEN = '''
    import no_such_module_for_run_tests  # noqa: F401


    def test_never_runs():
        pass
'''
CLOSING = re.compile(r'^tests: (\d+) passed, (\d+) failed, (\d+) skipped, '
                     r'(\d+) expected failures(.*)$')
SCRUB = ('ALLOW_SKIPS', 'SKIP_PEP8', 'UNIT_TEST_PATH', 'FUNCTIONAL_TEST_PATH',
         'UPSTREAM_TEST_PATH', 'FUNCTIONAL_CONCURRENCY', 'VENV',
         'OS_TEST_PATH', 'PYTHONPATH')


class RunTestsScriptTestCase(testtools.TestCase):

    def setUp(self):
        super(RunTestsScriptTestCase, self).setUp()
        self.project = self.useFixture(fixtures.TempDir()).path
        self._write('.stestr.conf',
                    '[DEFAULT]\ntest_path=./tests/unit\ntop_dir=./\n')
        self._write('tox.ini', '[flake8]\nexclude = .stestr\n')
        for package in ('tests', 'tests/unit', 'tests/upstream',
                        'tests/functional'):
            self._write(os.path.join(package, '__init__.py'), '')
        self._write('tests/upstream/test_up.py', UPSTREAM)
        os.makedirs(os.path.join(self.project, 'tools'))
        shutil.copy(SCRIPT, os.path.join(self.project, 'tools',
                                         'run-tests.sh'))

    def _write(self, name, text):
        path = os.path.join(self.project, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'w') as f:
            f.write(textwrap.dedent(text).lstrip())

    def _run(self, *args, **env_overrides):
        env = {k: v for k, v in os.environ.items() if k not in SCRUB}
        env['PATH'] = os.pathsep.join(
            [os.path.dirname(sys.executable), env.get('PATH', '')])
        env.update(env_overrides)
        proc = subprocess.run(
            ['bash', os.path.join(self.project, 'tools', 'run-tests.sh'),
             '--no-install'] + list(args),
            cwd=self.project, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, universal_newlines=True, timeout=600)
        self.addDetail('stdout', content.text_content(proc.stdout))
        self.addDetail('stderr', content.text_content(proc.stderr))
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        self.assertTrue(lines, 'run-tests.sh printed nothing')
        self.assertEqual(
            1, len([line for line in lines if CLOSING.match(line)]),
            'exactly one closing line')
        self.assertIsNotNone(CLOSING.match(lines[-1]),
                             'the closing line is the last line')
        return proc.returncode, lines[-1], proc.stdout

    def test_skip_counted_and_fails_the_run(self):
        self._write('tests/unit/test_a.py', PASSING)
        self._write('tests/unit/test_b.py', SKIPPED)
        self._write('tests/functional/test_c.py', PASSING)
        rc, closing, out = self._run(SKIP_PEP8='1')
        self.assertEqual('tests: 3 passed, 0 failed, 1 skipped, '
                         '1 expected failures; pep8: not run',
                         closing)
        self.assertNotEqual(0, rc)
        self.assertIn('ALLOW_SKIPS=1', out)
        self.assertIn('tests.unit.test_b.SkipTestCase.test_skip', out)

    def test_skip_allowed_with_allow_skips(self):
        self._write('tests/unit/test_a.py', PASSING)
        self._write('tests/unit/test_b.py', SKIPPED)
        self._write('tests/functional/test_c.py', PASSING)
        rc, closing, out = self._run(ALLOW_SKIPS='1')
        self.assertEqual('tests: 3 passed, 0 failed, 1 skipped, '
                         '1 expected failures', closing)
        self.assertEqual(0, rc)

    def test_pass_skip_and_fail_each_counted(self):
        self._write('tests/unit/test_a.py', PASSING)
        self._write('tests/unit/test_b.py', SKIPPED)
        self._write('tests/unit/test_c.py', FAILING)
        self._write('tests/functional/test_d.py', PASSING)
        rc, closing, out = self._run(ALLOW_SKIPS='1')
        self.assertEqual('tests: 3 passed, 1 failed, 1 skipped, '
                         '1 expected failures', closing)
        self.assertNotEqual(0, rc)
        # The failed test just before the closing line (a report may show
        # only the tail), with the test's failing line and the exception's
        # first line, though the message ends in many other lines.
        tail = out.splitlines()[-12:]
        failed = tail.index('failed tests:')
        self.assertEqual('tests.unit.test_c.FailTestCase.test_fail (fail)',
                         tail[failed + 1])
        self.assertIn('/tests/unit/test_c.py", line 7, in test_fail',
                      tail[failed + 2])
        self.assertIn('self.fail(', tail[failed + 3])
        self.assertEqual('AssertionError: boom', tail[failed + 4].strip())
        self.assertEqual('a line of stderr', tail[failed + 5].strip())

    def test_clean_run_passes(self):
        self._write('tests/unit/test_a.py', PASSING)
        self._write('tests/functional/test_b.py', PASSING)
        rc, closing, out = self._run()
        self.assertEqual('tests: 3 passed, 0 failed, 0 skipped, '
                         '1 expected failures', closing)
        self.assertEqual(0, rc)

    def test_failed_discovery_counts_once_as_failure(self):
        # The unit run passes; discovery of the functional tests fails on
        # an ImportError.  That run stores nothing in the stestr
        # repository, so "stestr last" would count the unit run again.
        self._write('tests/unit/test_a.py', PASSING)
        self._write('tests/functional/test_b.py', BROKEN)
        rc, closing, out = self._run(SKIP_PEP8='1')
        self.assertEqual('tests: 2 passed, 1 failed, 0 skipped, '
                         '1 expected failures; pep8: not run',
                         closing)
        self.assertNotEqual(0, rc)
        self.assertIn('no_such_module_for_run_tests', out)
        self.assertIn('failed tests:\nfunctional: the run itself (stestr '
                      'exited ', out)

    def test_failed_unit_discovery_does_not_count_an_older_run(self):
        self._write('tests/unit/test_a.py', PASSING)
        self._write('tests/functional/test_b.py', PASSING)
        rc, closing, out = self._run(SKIP_PEP8='1')
        self.assertEqual(0, rc)
        # Second run: the unit tests no longer import.
        self._write('tests/unit/test_a.py', BROKEN)
        rc, closing, out = self._run(SKIP_PEP8='1')
        self.assertEqual('tests: 2 passed, 1 failed, 0 skipped, '
                         '1 expected failures; pep8: not run',
                         closing)
        self.assertNotEqual(0, rc)

    def test_pep8_failure_in_closing_line(self):
        self._write('tests/unit/test_a.py', PASSING)
        self._write('tests/functional/test_b.py', PASSING)
        self._write('tests/unit/badly_formatted.py', 'x=1;y =2\n')
        rc, closing, out = self._run()
        self.assertEqual('tests: 3 passed, 0 failed, 0 skipped, '
                         '1 expected failures; pep8: FAILED',
                         closing)
        self.assertNotEqual(0, rc)

    def test_test_paths_overridable(self):
        self._write('tests/unit/test_a.py', FAILING)
        self._write('tests/functional/test_b.py', FAILING)
        self._write('tests/other/__init__.py', '')
        self._write('tests/other/test_c.py', PASSING)
        self._write('tests/more/__init__.py', '')
        self._write('tests/more/test_d.py', PASSING)
        rc, closing, out = self._run(
            SKIP_PEP8='1', UNIT_TEST_PATH='./tests/other',
            FUNCTIONAL_TEST_PATH='./tests/more')
        self.assertEqual('tests: 3 passed, 0 failed, 0 skipped, '
                         '1 expected failures; pep8: not run',
                         closing)
        self.assertEqual(0, rc)

    def test_expected_failures_counted_and_named(self):
        self._write('tests/unit/test_a.py', PASSING)
        self._write('tests/functional/test_b.py', PASSING)
        rc, closing, out = self._run(SKIP_PEP8='1')
        self.assertEqual('tests: 3 passed, 0 failed, 0 skipped, '
                         '1 expected failures; pep8: not run', closing)
        self.assertEqual(0, rc)
        self.assertIn('expected failures: 1 upstream test(s), not counted '
                      'as passed, each failed with the exception listed '
                      'with its reason in tests/upstream/differences.txt',
                      out)

    def test_unexpected_success_fails_the_run(self):
        self._write('tests/unit/test_a.py', PASSING)
        self._write('tests/functional/test_b.py', PASSING)
        self._write('tests/upstream/test_up.py', UNEXPECTED_SUCCESS)
        rc, closing, out = self._run(SKIP_PEP8='1')
        self.assertEqual('tests: 2 passed, 1 failed, 0 skipped, '
                         '0 expected failures; pep8: not run',
                         closing)
        self.assertNotEqual(0, rc)

    def _stand_ins(self, tempest_exit):
        """tools/run_tempest.py and tools/benchmark-smoke.sh stand-ins.

        The functional test and the benchmarks wait for a mark tempest's
        stand-in leaves when it starts: they pass only if tempest started
        before them.
        """
        self._write('tools/run_tempest.py', '''
            import os
            import sys
            open('tempest-started', 'w').close()
            print('tempest[tgt]: ran 2, passed 2, skipped 0, failed 0')
            print('tempest: ran 2, passed 2, skipped 0, failed 0 (1 s)')
            sys.exit(%d)
        ''' % tempest_exit)
        self._write('tools/benchmark-smoke.sh', '''
            #!/bin/bash
            for _ in $(seq 100); do
                [ -e tempest-started ] && break
                sleep 0.1
            done
            if [ -e tempest-started ]; then
                echo "benchmarks: 1 ran, 0 failed"
            else
                echo "benchmarks: 1 ran, 1 failed"; exit 1
            fi
        ''')
        os.chmod(os.path.join(self.project, 'tools', 'benchmark-smoke.sh'),
                 0o755)
        self._write('tests/unit/test_a.py', PASSING)
        self._write('tests/functional/test_b.py', AFTER_TEMPEST_STARTED)

    def test_tempest_runs_beside_the_functional_tests_its_output_after(self):
        self._stand_ins(tempest_exit=0)
        rc, closing, out = self._run(SKIP_PEP8='1')
        self.assertEqual('tests: 3 passed, 0 failed, 0 skipped, '
                         '1 expected failures; pep8: not run; benchmarks: 1 '
                         'ran, 0 failed; tempest: ran 2, passed 2, skipped 0,'
                         ' failed 0', closing)
        self.assertEqual(0, rc)
        self.assertLess(out.index('benchmarks: 1 ran'),
                        out.index('tempest[tgt]: ran 2'))
        self.assertRegex(out, r'stages: .*benchmarks \d+ s, tempest '
                              r'\(beside the functional tests and '
                              r'benchmarks\) \d+ s')

    def test_tempest_failure_fails_the_run(self):
        self._stand_ins(tempest_exit=1)
        rc, closing, out = self._run(SKIP_PEP8='1')
        self.assertTrue(closing.endswith('; tempest: FAILED'), closing)
        self.assertNotEqual(0, rc)
