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


"""Horizon plugin: the safe action where operators reach for reset-state.

Admin > Volume > Volume Attachments lists the volumes that are attached,
in a transition or in a state the audit finds wrong, with what it finds
from Cinder's and Nova's APIs (:mod:`.findings`), and a "Force Detach"
action (one attachment, or every host) that runs our force-detach through
Cinder's API (:mod:`cinder_forcedetach.cmd.api_commands`, as the
``openstack`` and ``cinder-forcedetach`` commands do), after a
confirmation that names what will be cut.  The same action is added to
Admin > Volume > Volumes, and "Update Volume Status" (reset-state) on an
attached volume warns and offers it (:mod:`.overrides`).

Install in Horizon's environment: ``pip install cinder-forcedetach``, copy
``enabled/_2225_admin_volume_attachments_panel.py`` into
``openstack_dashboard/local/enabled/``, restart Horizon.  The enabled
file sets Horizon's ``customization_module`` to :mod:`.overrides`; a
deployment with its own imports ours from it instead.

Nothing in this module imports Horizon: the developer box reads
:data:`ENABLED_DIR` from its settings.
"""

import os

#: Horizon's enabled files of the plugin.
ENABLED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           'enabled')
