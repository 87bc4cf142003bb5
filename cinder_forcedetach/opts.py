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

"""The ``oslo.config.opts`` entry point: every option, per backend section.

Each option is owned, defined and registered by the module that reads it;
this module only gathers them for ``oslo-config-generator``.
"""

import itertools

from cinder.volume import configuration

from cinder_forcedetach.arrays import sqlite as sqlite_array
from cinder_forcedetach.drivers import common
from cinder_forcedetach.drivers import iscsi
from cinder_forcedetach.drivers import rbd
from cinder_forcedetach import image_gates
from cinder_forcedetach import mixin
from cinder_forcedetach import reconciler


def list_opts():
    """Options per backend section ([backend_defaults] or its own)."""
    return [(configuration.SHARED_CONF_GROUP,
             list(itertools.chain(mixin.force_detach_opts,
                                  image_gates.image_opts,
                                  common.volume_file_opts, iscsi.iscsi_opts,
                                  sqlite_array.fc_opts, rbd.rbd_opts,
                                  reconciler.reconcile_opts)))]
