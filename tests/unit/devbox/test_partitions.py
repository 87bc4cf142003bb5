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

"""The rule a partition adds.

The cut itself (a real cgroup, real iptables, a real listener) runs in
``tests/functional/test_partitions.py``.
"""

import testtools

from devbox import partitions


class DropRuleTestCase(testtools.TestCase):

    def test_the_groups_tcp_to_the_port_dropped_and_tagged(self):
        self.assertEqual(
            ['-m', 'cgroup', '--path', 'cfd-t/cinder-volume-1', '-p', 'tcp',
             '--dport', '2379', '-m', 'comment', '--comment', 'cfd-t',
             '-j', 'DROP'],
            partitions.drop_rule('cfd-t/cinder-volume-1', 2379, 'cfd-t'))
