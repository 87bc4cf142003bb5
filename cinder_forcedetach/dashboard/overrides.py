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


"""Horizon's ``customization_module``: the safe action beside reset-state.

* Admin > Volume > Volumes gets our Force Detach row action, before
  "Update Volume Status".
* "Update Volume Status" (``os-reset_status``: Cinder's database only) on
  a volume that is attached or in a transition warns that the storage
  still exports it, and offers Force Detach instead.
"""

from django.urls import reverse
from openstack_dashboard.dashboards.admin.volumes import (
    tables as admin_tables)
from openstack_dashboard.dashboards.admin.volumes import (
    views as admin_views)

from cinder_forcedetach.audit import from_api
from cinder_forcedetach.dashboard.volume_attachments import (
    tables as fd_tables)


def add_row_action(table, action, before):
    """Put *action* in *table*'s row actions, before *before*'s.

    Idempotent: a module imported again adds nothing twice.
    """
    if action.name in table.base_actions:
        return
    table.base_actions[action.name] = action()
    row_actions = list(table._meta.row_actions)
    names = [a.name for a in row_actions]
    at = names.index(before) if before in names else len(row_actions)
    table._meta.row_actions = tuple(row_actions[:at] + [action] +
                                    row_actions[at:])


def held(volume):
    """Whether a host may still reach *volume* (attached or in between)."""
    return bool(getattr(volume, 'attachments', None)) or (
        getattr(volume, 'status', None) in from_api.LISTED_STATUSES)


def warn_when_held(view_class):
    """*view_class* (upstream's) warns and offers Force Detach when held.

    Patched in place, not subclassed: upstream's URLconf holds the class.
    """
    if getattr(view_class, 'offers_force_detach', False):
        return
    upstream_context = view_class.get_context_data

    def get_context_data(self, **kwargs):
        context = upstream_context(self, **kwargs)
        volume = self.get_data()
        if held(volume):
            context['force_detach_url'] = reverse(fd_tables.URL,
                                                  args=(volume.id,))
        return context

    view_class.get_context_data = get_context_data
    view_class.template_name = 'volume_attachments/update_status.html'
    view_class.offers_force_detach = True


add_row_action(admin_tables.VolumesTable, fd_tables.ForceDetachLink,
               before='update_status')
warn_when_held(admin_views.UpdateStatusView)
