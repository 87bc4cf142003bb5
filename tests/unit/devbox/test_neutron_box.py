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

"""The box's ML2 mechanism driver binds the first segment, active."""

from unittest import mock

from neutron_lib.api.definitions import portbindings
from neutron_lib import constants
import testtools

from devbox import neutron_box


class BoxMechanismDriverTestCase(testtools.TestCase):

    def test_binds_the_first_segment_as_an_active_tap_port(self):
        context = mock.Mock(segments_to_bind=[{'id': 'seg-1'},
                                              {'id': 'seg-2'}])
        neutron_box.BoxMechanismDriver().bind_port(context)
        context.set_binding.assert_called_once_with(
            'seg-1', portbindings.VIF_TYPE_TAP,
            {portbindings.CAP_PORT_FILTER: False},
            status=constants.PORT_STATUS_ACTIVE)

    def test_no_segment_no_binding(self):
        context = mock.Mock(segments_to_bind=[])
        neutron_box.BoxMechanismDriver().bind_port(context)
        context.set_binding.assert_not_called()

    def test_registered_for_ml2(self):
        from importlib import metadata
        found = [ep for ep in metadata.entry_points(
            group='neutron.ml2.mechanism_drivers') if ep.name == 'box_fake']
        self.assertEqual([neutron_box.BoxMechanismDriver],
                         [ep.load() for ep in found])
