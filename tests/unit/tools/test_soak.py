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

import importlib.util
import io
import os
from unittest import mock

import fixtures
import testtools

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
