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

"""The oslo.config.opts entry point lists what each module owns."""

import testtools

from cinder_forcedetach.arrays import sqlite
from cinder_forcedetach.drivers import common
from cinder_forcedetach.drivers import iscsi
from cinder_forcedetach.drivers import rbd
from cinder_forcedetach import image_gates
from cinder_forcedetach import mixin
from cinder_forcedetach import opts
from cinder_forcedetach import reconciler


class ListOptsTestCase(testtools.TestCase):

    def test_every_owned_option_listed_once(self):
        listed = [o.dest for _group, group in opts.list_opts()
                  for o in group]
        owned = [o.dest for o in (mixin.force_detach_opts
                                  + image_gates.image_opts
                                  + common.volume_file_opts
                                  + iscsi.iscsi_opts + sqlite.fc_opts
                                  + rbd.rbd_opts
                                  + reconciler.reconcile_opts)]
        self.assertEqual(sorted(owned), sorted(listed))
        self.assertEqual(len(set(listed)), len(listed))
        self.assertIn('forcedetach_rbd_blocklist_expire_seconds', listed)
