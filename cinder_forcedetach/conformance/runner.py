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

"""Run the checks against a target and make the summary table."""

import dataclasses
import re
import time
import traceback
import unittest
import warnings

from cinder_forcedetach.conformance import suite as suite_mod

PASS, FAIL, NA = 'pass', 'FAIL', 'n/a'
_EXC_LINE = re.compile(r'^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*'
                       r'(?:Error|Exception|Failed|Failure|Crash|Fault)): '
                       r'(.*)$')


@dataclasses.dataclass
class Row(object):
    rule: str
    check: str
    result: str
    message: str = ''
    details: str = ''
    seconds: float = 0.0


class _Result(unittest.TestResult):
    """Collects one :class:`Row` per check."""

    def __init__(self):
        super(_Result, self).__init__()
        self.rows = []
        self._started = {}

    def startTest(self, test):
        super(_Result, self).startTest(test)
        self._started[test.id()] = time.monotonic()

    def _row(self, test, result, message='', details=''):
        rule, check = suite_mod.rule_of(test.id())
        message = ' '.join(str(message).split())
        if result == FAIL and not message.startswith(rule):
            message = '%s %s: %s' % (rule, suite_mod.RULES.get(rule, ''),
                                     message)
        seconds = time.monotonic() - self._started.get(test.id(),
                                                       time.monotonic())
        self.rows.append(Row(rule, check, result, message, details,
                             round(seconds, 1)))

    def addSuccess(self, test):
        super(_Result, self).addSuccess(test)
        # What the check noted (suite.ConformanceChecks.note), e.g. R6's
        # HTTP statuses and what Cinder left of the volume.
        self._row(test, PASS, '. '.join(getattr(test, '_notes', None) or ()))

    def _failed(self, test, err, kind):
        exc = err[1]
        name, text = type(exc).__name__, str(exc)
        if name == '_StringException':
            # testtools hands a plain result its details as text (captured
            # log, then the traceback): the exception is its last line
            # naming one.
            found = [m for m in map(_EXC_LINE.match, text.splitlines())
                     if m]
            if found:
                name, text = found[-1].group(1).rsplit('.', 1)[-1], \
                    found[-1].group(2)
        text = (text.strip().splitlines() or [''])[0]
        if name != 'AssertionError':
            text = '%s %s: %s' % (kind, name, text)
        self._row(test, FAIL, text,
                  ''.join(traceback.format_exception(*err)))

    def addFailure(self, test, err):
        super(_Result, self).addFailure(test, err)
        self._failed(test, err, 'failure')

    def addError(self, test, err):
        super(_Result, self).addError(test, err)
        self._failed(test, err, 'error')

    def addSkip(self, test, reason):
        super(_Result, self).addSkip(test, reason)
        if str(reason).startswith('n/a'):
            self._row(test, NA, reason)
        else:
            self._row(test, FAIL, 'skipped: %s' % reason)

    def addExpectedFailure(self, test, err):
        super(_Result, self).addExpectedFailure(test, err)
        self._row(test, PASS)

    def addUnexpectedSuccess(self, test):
        super(_Result, self).addUnexpectedSuccess(test)
        self._row(test, FAIL, 'unexpected success')


def load(target, rules=None):
    """The checks bound to *target*; *rules*: only these ('R1', ...)."""
    cls = suite_mod.case_class(target)
    tests = unittest.TestLoader().loadTestsFromTestCase(cls)
    if rules:
        wanted = {r.upper() for r in rules}
        tests = unittest.TestSuite(
            t for t in tests if suite_mod.rule_of(t.id())[0] in wanted)
    return tests


def run(target, rules=None, progress=None):
    """Run the checks; returns the :class:`Row` list, in rule order.

    *progress*: called with each row as its check ends.
    """
    result = _Result()
    if progress:
        class _Rows(list):
            def append(self, row):
                super(_Rows, self).append(row)
                progress(row)
        result.rows = _Rows()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)
        load(target, rules).run(result)
    return sorted(result.rows, key=lambda r: (int(r.rule[1:])
                                              if r.rule[1:].isdigit()
                                              else 99, r.check))


def passed(rows):
    """True when every applicable check passed (n/a is not a failure)."""
    return bool(rows) and all(r.result in (PASS, NA) for r in rows)


def table(rows, width=110):
    """The summary table: rule | check | result | message."""
    def cut(text):
        return text if len(text) <= width else text[:width - 3] + '...'
    lines = ['| rule | check | result | message |',
             '| --- | --- | --- | --- |']
    for row in rows:
        lines.append('| %s | %s | %s | %s |' % (
            row.rule, row.check, row.result,
            cut(row.message.replace('|', '\\|'))))
    counts = {k: sum(1 for r in rows if r.result == k)
              for k in (PASS, FAIL, NA)}
    lines.append('')
    lines.append('%d checks: %d pass, %d FAIL, %d n/a -> %s' % (
        len(rows), counts[PASS], counts[FAIL], counts[NA],
        'CONFORMANT' if passed(rows) else 'NOT CONFORMANT'))
    return '\n'.join(lines)
