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

"""tests/upstream/differences.txt: each expected failure fails as listed.

A listed upstream test is an expected failure only when it fails with the
exception type and message fragment its line gives; any other failure is
a failure, a pass an unexpected success, and an id outside the upstream
modules (or naming no test) an error.
"""

import types

import testtools

from tests import upstream

PREFIX = 'cinder.tests.unit.volume.drivers.test_fake'
OTHER = 'cinder.tests.unit.volume.drivers.test_other'


class VolumeNotFound(Exception):
    pass


def _module():
    """A fresh fake upstream test module, one class of four tests."""

    class FakeTestCase(testtools.TestCase):

        def test_asserts_upstream(self):
            raise AssertionError("Expected 'import' to have been called.")

        def test_raises_not_found(self):
            raise VolumeNotFound('Volume 1 could not be found.')

        def test_passes(self):
            pass

        def test_skips(self):
            self.skipTest('not here')

    return types.SimpleNamespace(FakeTestCase=FakeTestCase)


def _line(method, expected, reason='ours differs'):
    return '%s.FakeTestCase.%s | %s | %s' % (PREFIX, method, expected, reason)


class ParseDifferencesTestCase(testtools.TestCase):

    def test_three_fields(self):
        differences = upstream.parse_differences([
            '# comment', '',
            _line('test_asserts_upstream',
                  "AssertionError: Expected 'import' to have been called",
                  'asserts upstream | its import')])
        self.assertEqual(
            {PREFIX + '.FakeTestCase.test_asserts_upstream':
             upstream.Difference(
                 'AssertionError', "Expected 'import' to have been called",
                 'asserts upstream | its import')},
            differences)

    def test_old_format_without_exception_is_an_error(self):
        e = self.assertRaises(ValueError, upstream.parse_differences, [
            PREFIX + '.FakeTestCase.test_passes  # ours differs'], 'd.txt')
        self.assertIn('d.txt:1', str(e))

    def test_missing_reason_is_an_error(self):
        self.assertRaises(ValueError, upstream.parse_differences, [
            _line('test_passes', 'AssertionError: x', reason='')])

    def test_exception_without_fragment_is_an_error(self):
        for expected in ('AssertionError', 'AssertionError:',
                         ': fragment', 'not a type: fragment'):
            self.assertRaises(ValueError, upstream.parse_differences,
                              [_line('test_passes', expected)])

    def test_a_test_listed_twice_is_an_error(self):
        line = _line('test_passes', 'AssertionError: x')
        e = self.assertRaises(ValueError, upstream.parse_differences,
                              [line, line])
        self.assertIn('listed twice', str(e))

    def test_the_real_file_parses_with_known_ids(self):
        differences = upstream.read_differences()
        self.assertTrue(differences)
        self.assertEqual([], upstream.foreign_ids(
            differences, upstream.upstream_modules()))


class UpstreamModulesTestCase(testtools.TestCase):

    def test_read_from_the_test_modules(self):
        self.assertEqual({'cinder.tests.unit.volume.drivers.test_rbd',
                          'cinder.tests.unit.volume.drivers.test_lvm_driver'},
                         upstream.upstream_modules())

    def test_foreign_ids(self):
        differences = {PREFIX + '.C.test_a': None,
                       OTHER + '.C.test_b': None,
                       PREFIX + 'x.C.test_c': None,
                       'tests.upstream.test_rbd.C.test_d': None}
        self.assertEqual(
            [PREFIX + 'x.C.test_c', OTHER + '.C.test_b',
             'tests.upstream.test_rbd.C.test_d'],
            upstream.foreign_ids(differences, {PREFIX}))


class MatchesTestCase(testtools.TestCase):

    def test_type_and_fragment(self):
        difference = upstream.Difference(
            'VolumeNotFound', 'could not be found', 'r')
        self.assertTrue(upstream.matches(
            difference, VolumeNotFound('Volume 1 could not be found.')))
        self.assertFalse(upstream.matches(
            difference, KeyError('Volume 1 could not be found.')))
        self.assertFalse(upstream.matches(
            difference, VolumeNotFound('Volume 1 is busy.')))

    def test_dotted_type(self):
        difference = upstream.Difference(
            '%s.VolumeNotFound' % __name__, 'found', 'r')
        self.assertTrue(upstream.matches(difference,
                                         VolumeNotFound('not found')))

    def test_a_subclass_is_another_exception(self):
        class Sub(AssertionError):
            pass
        self.assertFalse(upstream.matches(
            upstream.Difference('AssertionError', 'x', 'r'), Sub('x')))


class MarkDifferencesTestCase(testtools.TestCase):

    def _run(self, method, expected):
        module = _module()
        upstream.mark_differences(
            module, PREFIX, upstream.parse_differences(
                [_line(method, expected)]), modules={PREFIX})
        result = testtools.TestResult()
        module.FakeTestCase(method).run(result)
        return result

    def test_listed_failure_is_expected(self):
        result = self._run(
            'test_asserts_upstream',
            "AssertionError: Expected 'import' to have been called")
        self.assertEqual(1, len(result.expectedFailures))
        self.assertEqual([], result.errors + result.failures)
        self.assertTrue(result.wasSuccessful())

    def test_other_exception_fails(self):
        result = self._run('test_raises_not_found',
                           'AssertionError: could not be found')
        self.assertEqual([], result.expectedFailures)
        self.assertEqual(1, len(result.errors + result.failures))
        self.assertFalse(result.wasSuccessful())
        (_test, report), = result.errors + result.failures
        self.assertIn('VolumeNotFound: Volume 1 could not be found.', report)
        self.assertIn('listed as failing with "AssertionError: could not be '
                      'found"', report)

    def test_other_message_fails(self):
        result = self._run('test_raises_not_found',
                           'VolumeNotFound: is busy')
        self.assertEqual([], result.expectedFailures)
        self.assertFalse(result.wasSuccessful())

    def test_pass_is_an_unexpected_success(self):
        result = self._run('test_passes', 'AssertionError: x')
        self.assertEqual(1, len(result.unexpectedSuccesses))
        self.assertFalse(result.wasSuccessful())

    def test_skip_stays_a_skip(self):
        result = self._run('test_skips', 'AssertionError: x')
        self.assertEqual(['test_skips'], [
            test._testMethodName
            for test in result.skip_reasons.get('not here', [])])

    def test_unknown_test_of_the_module_is_an_error(self):
        e = self.assertRaises(
            ValueError, upstream.mark_differences, _module(), PREFIX,
            upstream.parse_differences(
                [_line('test_no_such_test', 'AssertionError: x')]),
            modules={PREFIX})
        self.assertIn(PREFIX + '.FakeTestCase.test_no_such_test', str(e))

    def test_id_of_an_unknown_module_is_an_error(self):
        # Any module's import checks the whole list, so an id of a module
        # no tests/upstream/test_*.py loads is not silently ignored.
        differences = upstream.parse_differences([
            _line('test_passes', 'AssertionError: x'),
            OTHER + '.FakeTestCase.test_x | AssertionError: x | r'])
        e = self.assertRaises(ValueError, upstream.mark_differences,
                              _module(), PREFIX, differences,
                              modules={PREFIX})
        self.assertIn(OTHER + '.FakeTestCase.test_x', str(e))

    def test_ids_of_other_known_modules_are_left_to_them(self):
        module = _module()
        differences = upstream.parse_differences([
            _line('test_asserts_upstream', 'AssertionError: import'),
            OTHER + '.FakeTestCase.test_x | AssertionError: x | r'])
        upstream.mark_differences(module, PREFIX, differences,
                                  modules={PREFIX, OTHER})
        result = testtools.TestResult()
        module.FakeTestCase('test_asserts_upstream').run(result)
        self.assertEqual(1, len(result.expectedFailures))
