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

"""What the commands that run on a volume host share."""

import fixtures
from oslo_config import cfg
import testtools

from cinder_forcedetach.cmd import local


class ClusterOptionTestCase(testtools.TestCase):

    def test_cluster_read_from_the_file_without_cinder_volume(self):
        """The volume services' cluster, which the command never imports."""
        conf_file = self.useFixture(fixtures.TempDir()).join('cinder.conf')
        with open(conf_file, 'w') as f:
            f.write('[DEFAULT]\ncluster = box\n')
        conf = cfg.ConfigOpts()
        conf(['--config-file', conf_file], project='cinder')
        self.assertEqual('box', local.cluster_of(conf))
        self.assertEqual('box', local.cluster_of(conf))   # registered once

    def test_no_cluster(self):
        conf = cfg.ConfigOpts()
        conf([], project='cinder', default_config_files=[],
             default_config_dirs=[])
        self.assertIsNone(local.cluster_of(conf))
