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

"""The ML2 mechanism driver ``box_fake`` of the box's real Neutron.

The box runs no L2 agent, and no upstream driver binds a port without
one.  This one binds every port on any host as a tap port, active at
once: Nova's fake virt driver plugs nothing, and Nova's libvirt driver
makes the tap device itself (``plug_tap``: no Open vSwitch here) and
gives it to qemu; no packet goes further.  Networks, subnets, routers,
ports and security groups are real Neutron's.
"""

from neutron_lib.api.definitions import portbindings
from neutron_lib import constants
from neutron_lib.plugins.ml2 import api


class BoxMechanismDriver(api.MechanismDriver):
    """Bind every port, on any host, as an active tap port."""

    def initialize(self):
        pass

    @property
    def connectivity(self):
        return portbindings.CONNECTIVITY_L2

    def bind_port(self, context):
        for segment in context.segments_to_bind:
            context.set_binding(segment[api.ID], portbindings.VIF_TYPE_TAP,
                                {portbindings.CAP_PORT_FILTER: False},
                                status=constants.PORT_STATUS_ACTIVE)
            return
