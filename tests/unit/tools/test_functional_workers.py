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

"""The functional tests' two stestr workers leave no test out."""

import os
import re

import testtools
import yaml

WORKERS = os.path.join(os.path.dirname(__file__), '..', '..', 'functional',
                       'workers.yaml')


class FunctionalWorkersTestCase(testtools.TestCase):

    def test_the_second_worker_runs_everything_the_first_does_not(self):
        with open(WORKERS) as f:
            [first], [second] = [w['worker'] for w in yaml.safe_load(f)]
        self.assertTrue(first.startswith('^'))
        self.assertEqual('^(?!%s)' % first[1:], second)
        ids = ['tests.functional.test_cluster.ClusterTestCase.test_a',
               'tests.functional.test_stack_nova.NovaBoxTestCase.test_b',
               'tests.functional.test_rbd.RBDTestCase.test_c',
               'tests.functional.test_rbd_host_fence.FenceTestCase.test_d',
               'tests.functional.test_new_module.NewTestCase.test_e']
        runs = [[i for i in ids if re.search(pattern, i)]
                for pattern in (first, second)]
        self.assertEqual(ids[:3], runs[0])
        self.assertEqual(ids[3:], runs[1])
