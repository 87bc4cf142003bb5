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

"""``--fix``: order, limit, refusals and failures (the flow itself is
tested on real backends)."""

import fixtures
import testtools

from cinder_forcedetach.audit import cases
from cinder_forcedetach.audit import repair


class FixTestCase(testtools.TestCase):

    def setUp(self):
        super(FixTestCase, self).setUp()
        self.ran = []

        def run(context, driver, finding):
            self.ran.append((driver, finding.volume_id))
            if finding.volume_id == 'boom':
                raise RuntimeError('tgtd down')
        self.useFixture(fixtures.MonkeyPatch(
            'cinder_forcedetach.audit.repair._run', run))

    def finding(self, vid, case='leaked_export', action=cases.DETACH_ALL,
                refused=None):
        return cases.Finding(case, vid, backend='b', action=action,
                             refused=refused)

    def test_limit_refusals_failures(self):
        findings = [self.finding('v1'),
                    self.finding('v2', refused='instance i is active'),
                    self.finding('v3', case='bdm_without_attachment',
                                 action=cases.NONE),
                    self.finding('boom'), self.finding('v4'),
                    self.finding('v5')]
        ran = repair.fix(None, findings, {'b': 'driver'}, limit=3)
        self.assertEqual(3, ran)
        self.assertEqual([('driver', 'v1'), ('driver', 'boom'),
                          ('driver', 'v4')], self.ran)
        self.assertEqual(
            ['repaired', 'refused: instance i is active',
             'refused: not ours to repair', 'failed: tgtd down',
             'repaired', 'over the fix limit (3)'],
            [f.result for f in findings])

    def test_only_selected_cases(self):
        findings = [self.finding('v1'),
                    self.finding('v2', case='stuck_transition')]
        repair.fix(None, findings, {'b': 'driver'},
                   only=['stuck_transition'])
        self.assertEqual(['not selected', 'repaired'],
                         [f.result for f in findings])


class RepairReasonTestCase(testtools.TestCase):
    """Each repair runs the flow as a forced detach of reason audit."""

    def test_every_flow_action_says_audit(self):
        calls = []
        self.useFixture(fixtures.MonkeyPatch(
            'cinder_forcedetach.flows.force_detach.run',
            lambda *args, **kwargs: calls.append(kwargs)))
        self.useFixture(fixtures.MonkeyPatch(
            'cinder.objects.Volume.get_by_id',
            staticmethod(lambda context, volume_id: volume_id)))

        class Context(object):
            def elevated(self, **kwargs):
                return self

        for action in (cases.REVOKE, cases.DETACH, cases.DETACH_ALL,
                       cases.RESUME, cases.TEARDOWN):
            repair._run(Context(), 'driver', cases.Finding(
                'leaked_export', 'v1', backend='b', action=action))
        self.assertEqual(5, len(calls))
        self.assertEqual({'audit'}, {c['reason'] for c in calls})
