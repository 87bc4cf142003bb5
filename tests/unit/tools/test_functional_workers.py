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

"""The functional tests' stestr workers leave no test out, run none twice."""

import os
import re

import testtools
import yaml

WORKERS = os.path.join(os.path.dirname(__file__), '..', '..', 'functional',
                       'workers.yaml')
NAMED = re.compile(r'^\^tests\\\.functional\\\.test_\((.*)\)\\\.$')


class FunctionalWorkersTestCase(testtools.TestCase):

    def test_the_last_worker_runs_everything_the_others_do_not(self):
        with open(WORKERS) as f:
            patterns = [w['worker'] for w in yaml.safe_load(f)]
        self.assertTrue(all(len(p) == 1 for p in patterns), patterns)
        patterns = [p[0] for p in patterns]
        named = [NAMED.match(p).group(1) for p in patterns[:-1]]
        self.assertEqual(
            '^(?!tests\\.functional\\.test_(%s)\\.)' % '|'.join(named),
            patterns[-1])
        ids = ['tests.functional.test_cluster.ClusterTestCase.test_a',
               'tests.functional.test_conformance.KitTestCase.test_b',
               'tests.functional.test_rbd.RBDTestCase.test_c',
               'tests.functional.test_stack.StackSmokeTestCase.test_d',
               'tests.functional.test_rbd_host_fence.FenceTestCase.test_e',
               'tests.functional.test_stack_keystone.KeystoneTestCase.test_f',
               'tests.functional.test_stack_nova.NovaBoxTestCase.test_g',
               'tests.functional.test_new_module.NewTestCase.test_h']
        runs = [[i for i in ids if re.search(pattern, i)]
                for pattern in patterns]
        self.assertEqual([ids[:2], ids[2:4], ids[4:]], runs)
