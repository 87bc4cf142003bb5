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


# Admin > Volume > Volume Attachments, after Admin > Volume > Volumes
# (_2220), and the Force Detach action beside Update Volume Status.
PANEL = 'volume_attachments'
PANEL_DASHBOARD = 'admin'
PANEL_GROUP = 'volume'
ADD_PANEL = ('cinder_forcedetach.dashboard.volume_attachments.panel.'
             'VolumeAttachments')
ADD_INSTALLED_APPS = ['cinder_forcedetach.dashboard']
UPDATE_HORIZON_CONFIG = {
    'customization_module': 'cinder_forcedetach.dashboard.overrides'}
