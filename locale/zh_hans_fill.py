# ruff: noqa: E501  (a translation table: one entry per line reads best)
"""Fill locale/zh_Hans/LC_MESSAGES/django.po from the table below (run after makemessages).

Usage: python locale/zh_hans_fill.py && django-admin compilemessages -l zh_Hans
"""
import re
import sys
from pathlib import Path

ZH = {
"Unknown field.": "未知字段。", "Read-only field.": "只读字段。",
"Whole GPUs": "整块 GPU", "%(n)s/8 of one GPU": "单块 GPU 的 %(n)s/8", "Name": "名称",
"For example: laptop, CI runner.": "例如：笔记本电脑、CI 运行器。", "Public key": "公钥",
"One OpenSSH public key line: ed25519, ECDSA or RSA (2048 bits or more).": "一行 OpenSSH 公钥：ed25519、ECDSA 或 RSA（至少 2048 位）。",
"GPU model": "GPU 型号", "Pick one or more acceptable models.": "选择一个或多个可接受的型号。",
"GPUs per node": "每节点 GPU 数", "Share of a GPU": "GPU 份额", "Only with one GPU on one node.": "仅限单节点单 GPU。",
"Nodes": "节点数", "Gang size: all nodes start together.": "组大小：所有节点同时启动。", "Locality": "拓扑位置",
"Locality is required": "必须满足拓扑位置", "Priority": "优先级", "Start": "开始", "As soon as possible": "尽快",
"At a chosen time": "指定时间", "Start at (UTC)": "开始时间（UTC）", "Duration (hours)": "时长（小时）",
"Give a start time, or choose to start now.": "请填写开始时间，或选择立即开始。",
"A share of a GPU is for one GPU on one node.": "GPU 份额仅适用于单节点单 GPU。", "New end (UTC)": "新的结束时间（UTC）",
"Reason (optional)": "原因（可选）", "Yes, I am sure": "是的，我确定", "State": "状态", "Any state": "任意状态",
"Current and upcoming": "当前及即将开始", "From": "起始", "Until": "截止", "The end date is before the start date.": "结束日期早于开始日期。",
"Email address": "电子邮件地址", "Role": "角色", "Expires (UTC, optional)": "过期时间（UTC，可选）", "Tenant": "租户",
"Requested": "已提交", "Queued": "排队中", "Scheduled": "已调度", "Provisioning": "准备中", "Active": "运行中",
"Releasing": "释放中", "Ended": "已结束", "Rejected": "已拒绝", "Cancelled": "已取消", "Failed": "失败",
"Preempted": "已抢占", "Expired": "已到期", "Owner": "所有者", "Admin": "管理员", "Member": "成员", "Viewer": "只读成员",
"Reserved": "预留", "On demand": "按需", "Spot (preemptible)": "竞价（可被抢占）", "Anywhere": "任意位置",
"One NVLink domain": "同一 NVLink 域", "One node": "同一节点", "One leaf switch": "同一叶交换机", "Fewest spine hops": "最少脊交换机跳数",
"State change": "状态变更", "Extended": "已延长", "Warning": "警告", "Placement": "放置", "Hardware problem": "硬件问题",
"Key %(name)s added (%(fp)s).": "已添加密钥 %(name)s（%(fp)s）。", "Key removed.": "密钥已删除。",
"Now working in %(tenant)s.": "当前租户：%(tenant)s。", "You are not a member of that tenant.": "您不是该租户的成员。",
"GPU quota for %(model)s is nearly used up.": "%(model)s 的 GPU 配额即将用尽。", "all models": "所有型号",
"GPU-hour budget for %(model)s is nearly used up.": "%(model)s 的 GPU 小时预算即将用尽。", "Lease %(name)s: %(state)s.": "租约 %(name)s：%(state)s。",
"Utilisation": "利用率", "Memory": "显存", "Temperature": "温度", "Power": "功耗", "Transmit": "发送", "Receive": "接收",
"Errors": "错误", "Live": "实时", "Not connected": "未连接", "Lease extended.": "租约已延长。", "Lease cancelled.": "租约已取消。",
"Lease is being released.": "租约正在释放。",
"This form was already submitted with other values. Open the order page again to place a new order.": "此表单已用其他内容提交过。请重新打开订购页面以下新订单。",
"Order placed: %(name)s.": "订单已提交：%(name)s。", "%(user)s joined the tenant.": "%(user)s 已加入租户。", "Role changed.": "角色已更改。",
"Choose a valid role.": "请选择有效的角色。", "Member removed.": "成员已移除。", "Key %(prefix)s revoked.": "密钥 %(prefix)s 已吊销。",
"Not allowed": "无权操作", "You are not allowed to do that": "您无权执行此操作",
"Your role in this tenant does not permit this action. A tenant admin can change your role.": "您在此租户中的角色不允许此操作。租户管理员可以更改您的角色。",
"Go to the dashboard": "返回仪表板", "Not found": "未找到", "We could not find that page": "找不到该页面",
"It may have moved, or it belongs to a tenant you are not a member of.": "该页面可能已移动，或属于您不是其成员的租户。",
"Something went wrong": "出错了", "Something went wrong on our side": "我们这边出了问题",
"The error has been logged. Please try again in a moment.": "错误已记录。请稍后重试。", "Skip to content": "跳到正文",
"Main": "主导航", "Dashboard": "仪表板", "Order GPUs": "订购 GPU", "Leases": "租约", "Calendar": "日历",
"Usage & billing": "用量与账单", "Switch": "切换", "Language": "语言", "Go": "确定", "Toggle dark mode": "切换深色模式",
"Theme": "主题", "Sign out": "退出登录", "API documentation": "API 文档", "Welcome": "欢迎", "Your tenants": "您的租户",
"You belong to no tenant yet.": "您尚未加入任何租户。", "Pool capacity": "资源池容量", "GPUs": "GPU", "Schedulable": "可调度",
"Admin console": "管理控制台", "Account locked": "账户已锁定", "Too many failed sign-ins": "登录失败次数过多",
"For your safety this account is locked for a while. Try again later, or reset your password.": "为了您的安全，此账户已被暂时锁定。请稍后再试，或重置密码。",
"Reset password": "重置密码", "Sign in": "登录", "Sign in to gpupool": "登录 gpupool",
"Your username and password didn't match. Please try again. After repeated failures the account is locked for a while.": "用户名或密码不正确，请重试。多次失败后账户将被暂时锁定。",
"Forgot your password?": "忘记密码？", "Password changed": "密码已更改", "Choose a new password": "设置新密码", "Set password": "设置密码",
"This reset link is invalid or was already used. Ask for a new one.": "此重置链接无效或已被使用。请重新申请。",
"Check your email": "请查收邮件", "If an account uses that address, we have sent it a link to choose a new password.": "如果有账户使用该地址，我们已向其发送设置新密码的链接。",
"Back to sign in": "返回登录", "Someone asked to reset the gpupool password of %(user)s.": "有人请求重置 %(user)s 的 gpupool 密码。",
"Choose a new password here:": "请在此设置新密码：", "If it was not you, ignore this email; nothing changes.": "如果不是您本人操作，请忽略此邮件，不会有任何更改。",
"Reset your password": "重置您的密码", "Enter your email address and we will send you a link to choose a new password.": "输入您的电子邮件地址，我们将发送设置新密码的链接。",
"Send reset link": "发送重置链接", "Reset your gpupool password": "重置您的 gpupool 密码", "nodes": "个节点", "until": "至",
"from": "自", "All models": "所有型号", "GPUs in use: %(used)s of %(max)s (%(pct)s %%)": "使用中的 GPU：%(used)s / %(max)s（%(pct)s %%）",
"GPUs in use": "使用中的 GPU", "Up to %(max)s GPUs at once": "同时最多 %(max)s 块 GPU",
"GPU-hours this month: %(used)s of %(max)s (%(pct)s %%)": "本月 GPU 小时：%(used)s / %(max)s（%(pct)s %%）",
"GPU-hour budget used": "已用 GPU 小时预算", "Estimated price for the whole lease": "整个租约的预估价格", "Can start now": "可立即开始",
"Cannot start now": "无法立即开始", "Fits your quota": "在配额之内", "Exceeds your quota": "超出配额", "Fits your budget": "在预算之内",
"Exceeds your budget": "超出预算", "Earliest start": "最早开始时间", "Why": "原因", "Alternatives": "替代方案", "Other model": "其他型号",
"Smaller": "更小规模", "Later": "更晚", "Fix the highlighted fields to see a price.": "请修正标出的字段以查看价格。",
"Change the form to see price, start time and whether it fits your quota.": "修改表单即可查看价格、开始时间以及是否符合配额。",
"Tenant administration": "租户管理", "Members": "成员", "API keys": "API 密钥", "Quotas": "配额", "Your new API key": "您的新 API 密钥",
"Copy it now: it is shown only once.": "请立即复制：它只显示一次。", "Your API keys for this tenant": "您在此租户的 API 密钥",
"Prefix": "前缀", "Created": "创建时间", "Last used": "最近使用", "Status": "状态", "Actions": "操作", "Revoked": "已吊销",
"Expires": "过期", "Revoke": "吊销", "No API keys yet.": "尚无 API 密钥。", "Create an API key": "创建 API 密钥", "Create key": "创建密钥",
"Weeks": "周", "Earlier": "更早", "Today": "今天", "Your tenant's leases from %(a)s to %(b)s.": "您的租户从 %(a)s 到 %(b)s 的租约。",
"Now": "现在", "No leases in these two weeks.": "这两周内没有租约。", "As a list": "列表形式", "None.": "无。", "Notifications": "通知",
"Active leases": "运行中的租约", "No active leases.": "没有运行中的租约。", "Upcoming and waiting": "即将开始与等待中",
"Nothing waiting.": "没有等待中的租约。", "Spend": "支出", "This month": "本月", "Forecast to month end": "月底预测",
"Billing figures are not available yet.": "暂无账单数据。", "Quota and budget": "配额与预算", "Details": "详情",
"No quota set: ask the platform team.": "尚未设置配额：请联系平台团队。", "Free now": "当前空闲", "GPUs free now by model": "按型号列出的当前空闲 GPU",
"Free": "空闲", "Installed": "已安装", "No GPUs installed.": "没有已安装的 GPU。", "Hardware problems on this lease": "此租约存在硬件问题",
"GPU unhealthy": "GPU 不健康", "port down": "端口断开", "Summary": "概要", "required": "必须", "End": "结束", "Ordered by": "订购人",
"Extend": "延长", "Release now": "立即释放", "Cancel order": "取消订单", "Connection": "连接信息", "Account": "账户",
"InfiniBand P_Key": "InfiniBand P_Key", "Health": "健康状况", "Healthy": "健康", "Unhealthy": "不健康", "HCA ports": "HCA 端口",
"Nodes are assigned when the lease is placed.": "租约调度后将分配节点。", "Log in with any SSH key from your profile.": "可使用个人资料中的任意 SSH 密钥登录。",
"Manage SSH keys": "管理 SSH 密钥", "Timeline": "时间线", "No events yet.": "暂无事件。", "Live telemetry": "实时遥测",
"updated every 2 seconds": "每 2 秒更新", "InfiniBand ports": "InfiniBand 端口", "Cancel %(name)s?": "取消 %(name)s？",
"The order is withdrawn; nothing is charged for time not used.": "订单将被撤回；未使用的时间不计费。", "Release %(name)s now?": "立即释放 %(name)s？",
"Your access to the GPUs ends now and the nodes are wiped. This cannot be undone.": "您对这些 GPU 的访问将立即结束，节点将被清除。此操作无法撤销。",
"Back": "返回", "Extend %(name)s": "延长 %(name)s", "Current end": "当前结束时间", "The calendar allows extending this lease until": "日历允许将此租约延长至",
"Confirm extension": "确认延长", "Calendar view": "日历视图", "Filter leases": "筛选租约", "Filter": "筛选", "Clear": "清除",
"No leases match.": "没有匹配的租约。", "Pages": "分页", "Previous": "上一页", "Page %(n)s of %(total)s": "第 %(n)s 页，共 %(total)s 页",
"Next": "下一页", "Members and roles": "成员与角色", "User": "用户", "Email": "电子邮件", "Role of %(u)s": "%(u)s 的角色", "Change": "更改",
"Remove this member?": "移除此成员？", "Remove": "移除", "Invite by email": "通过电子邮件邀请",
"The person needs a gpupool account with this email address.": "对方需要拥有使用此电子邮件地址的 gpupool 账户。", "Add member": "添加成员",
"No tenant": "无租户", "You belong to no tenant yet": "您尚未加入任何租户", "Ask a tenant admin to add you; then sign in again.": "请租户管理员添加您，然后重新登录。",
"What you need": "您的需求", "When": "时间", "Place order": "提交订单", "Preview price": "预览价格", "Preview": "预览", "Profile": "个人资料",
"SSH public keys": "SSH 公钥", "These keys can log in to the nodes of your tenants' leases.": "这些密钥可登录您所在租户的租约节点。",
"Type": "类型", "Fingerprint": "指纹", "Remove key %(name)s": "删除密钥 %(name)s", "No keys yet.": "尚无密钥。", "Add a key": "添加密钥",
"Add key": "添加密钥", "Username": "用户名", "Change password by email": "通过电子邮件更改密码", "Guaranteed": "保障量",
"Maximum GPUs": "GPU 上限", "In use": "使用中", "GPU-hour budget / month": "每月 GPU 小时预算", "Used this month": "本月已用",
"Quotas are set by the platform team.": "配额由平台团队设置。", "Use": "使用情况", "Billing pages": "账单页面", "Usage records": "用量记录",
"Invoices": "发票", "Budget": "预算", "Prices": "价格", "Billing": "账单", "Invoices and usage records will appear here.": "发票和用量记录将显示在这里。",
"Remove key": "删除密钥", "order accepted": "订单已接受", "placed": "已放置", "all nodes converged": "所有节点已就绪",
"released": "已释放", "reached its end time": "已到结束时间", "provisioning failed": "准备失败",
"reserved for a later start": "已为稍后开始预留", "nodes did not converge; retrying elsewhere": "节点未就绪；正在其他位置重试",
"teardown timed out": "清理超时", "system": "系统", "node not reachable": "节点无法访问", "Extend until then": "延长至该时间", "released early": "提前释放", "cancelled": "已取消", "at this month's rate so far": "按本月迄今的速度估算",
}
# issue 27 (healing, repair) and issue 29 (webhooks)
ZH.update({
"Say why.": "请说明原因。", "Level must be 1, 2 or 3.": "级别必须为 1、2 或 3。",
"Only hardware that passed its last validation can return to service.": "只有通过最近一次验证的硬件才能恢复服务。",
"validate it first": "请先验证", "Lease %(lease)s (%(id)s): %(what)s. The failed hardware is not billed.": "租约 %(lease)s（%(id)s）：%(what)s。故障硬件不计费。",
"Choose continue, wait or release.": "请选择继续、等待或释放。", "Your choice is recorded.": "您的选择已记录。",
"Repair": "维修", "Repair queue": "维修队列",
"Hardware out of service, oldest first. A part sent to repair was fenced out of its leases at once; it returns only after its node's agent validated it (a flapping part waits for you).": "停止服务的硬件，最早的在前。送修的部件已立即从其租约中隔离；只有在其节点代理验证通过后才会恢复（反复故障的部件等待您处理）。",
"Cause": "原因", "Since": "自", "Age": "时长", "flapping": "反复故障", "Apply": "执行",
"All hardware is in service.": "所有硬件均在服务中。", "Webhooks": "Webhook",
"Hardware of this lease failed: replacing it": "此租约的硬件发生故障：正在替换",
"The failed part was fenced out of your lease (no access, out of your partition). A replacement is being applied; your other nodes are untouched. The failed part is not billed.": "故障部件已从您的租约中隔离（无访问权限，已移出您的分区）。正在应用替换；您的其他节点不受影响。故障部件不计费。",
"Hardware of this lease failed and no replacement that keeps its placement is free now. The failed part is not billed. Choose:": "此租约的硬件发生故障，目前没有保持其放置要求的空闲替换。故障部件不计费。请选择：",
"Wait for a replacement": "等待替换", "Continue smaller": "缩小规模继续", "Failed hardware": "故障硬件",
"This lease runs degraded": "此租约降级运行", "Release the lease": "释放租约", "Failed at": "故障时间",
"Replaced by": "替换为", "Replacement active": "替换生效时间",
"Hardware cannot go from %(from)s to %(to)s.": "硬件不能从%(from)s转为%(to)s。",
"%(from)s → %(to)s is not allowed": "不允许 %(from)s → %(to)s", "Unknown action.": "未知操作。",
"[gpupool] %(lease)s: hardware failed, replacing it": "[gpupool] %(lease)s：硬件故障，正在替换",
"[gpupool] %(lease)s: failed hardware replaced": "[gpupool] %(lease)s：故障硬件已替换",
"[gpupool] %(lease)s runs degraded": "[gpupool] %(lease)s 降级运行",
"This lease is not degraded.": "此租约未处于降级状态。",
"Webhook endpoint": "Webhook 端点", "Webhook endpoints": "Webhook 端点", "New signing secret": "新的签名密钥",
"Until the time below, deliveries carry a signature with the old secret too.": "在下列时间之前，投递也会附带旧密钥的签名。",
"Enabled": "已启用", "Disabled": "已停用", "Old secret signs until": "旧密钥签名截止", "Disable": "停用", "Enable": "启用",
"Rotate secret": "轮换密钥", "Delete endpoint": "删除端点", "Save events": "保存事件", "Delivery log": "投递日志",
"Event": "事件", "Tries (response codes)": "尝试（响应码）", "Delivered": "已投递", "Pending": "待投递",
"Signing secret of the new endpoint": "新端点的签名密钥",
"Verify each delivery's webhook-signature with it (Standard Webhooks).": "用它验证每次投递的 webhook-signature（Standard Webhooks）。",
"Open the endpoint": "打开端点", "URL": "URL", "Add endpoint": "添加端点",
"Only http and https URLs can receive webhooks.": "只有 http 和 https URL 能接收 Webhook。", "The URL has no host.": "URL 没有主机。",
"%(host)s resolves to %(ip)s, which is not a public address.": "%(host)s 解析为 %(ip)s，不是公网地址。",
"More than %(n)s redirects.": "超过 %(n)s 次重定向。", "Refused: %(why)s": "已拒绝：%(why)s", "Timed out.": "超时。",
"A non-empty list, or [\"*\"] for all.": "非空列表，或用 [\"*\"] 表示全部。",
"This URL cannot receive webhooks.": "此 URL 不能接收 Webhook。", "Disabled by %(who)s.": "由 %(who)s 停用。",
"The endpoint is disabled: enable it first.": "端点已停用：请先启用。", "Disabled.": "已停用。",
"[gpupool] Webhook endpoint disabled: %(url)s": "[gpupool] Webhook 端点已停用：%(url)s",
"The webhook endpoint %(url)s (%(id)s) was disabled: %(reason)s Fix the receiver, then enable the endpoint again in the portal.": "Webhook 端点 %(url)s（%(id)s）已停用：%(reason)s 请修复接收方，然后在门户中重新启用该端点。",
"The receiver answered 410 Gone.": "接收方返回 410 Gone。", "%(n)s tries failed, the last with %(what)s.": "%(n)s 次尝试失败，最后一次为 %(what)s。",
"Endpoint %(url)s deleted.": "端点 %(url)s 已删除。", "%(id)s will be sent again.": "%(id)s 将重新发送。",
"The URL's port is not valid.": "URL 的端口无效。", "The host %(host)s does not resolve.": "主机 %(host)s 无法解析。",
"All events": "所有事件", "Events": "事件", "Receiver URL": "接收方 URL", "No such webhook endpoint.": "没有此 Webhook 端点。",
"No such webhook delivery.": "没有此 Webhook 投递。", "Choose at least one event.": "请至少选择一个事件。",
"Unknown event types.": "未知的事件类型。", "Unknown: %(names)s.": "未知：%(names)s。", "Events saved.": "事件已保存。",
"Send again": "重新发送", "Nothing delivered yet.": "尚无投递。", "No webhook endpoints yet.": "尚无 Webhook 端点。",
"Add an endpoint": "添加端点",
})
# Strings of the console and billing pages (same catalogue).
ZH.update({
"Node state changed.": "节点状态已更改。", "GPU updated.": "GPU 已更新。", "Priority changed.": "优先级已更改。",
"Tenant status changed.": "租户状态已更改。", "Console": "控制台", "Fabric map": "网络拓扑图", "Queue": "队列",
"Partitions": "分区", "Tenants": "租户", "Audit log": "审计日志", "Who": "操作人", "Action": "操作", "Object": "对象",
"Changes": "变更", "Older": "更早", "All tenants": "所有租户", "To": "至", "Usage CSV": "用量 CSV", "Month": "月份",
"Total": "合计", "Showback": "成本展示", "Lease": "租约", "Paid GPU-hours": "计费 GPU 小时", "Cost": "费用",
"Avg GPU utilisation": "平均 GPU 利用率", "GPUs allocated": "已分配 GPU",
"Colour: node state (green ready, amber draining, brown drained, red down, purple maintenance). Blue outline: GPUs allocated.": "颜色表示节点状态（绿色就绪、琥珀色排空中、棕色已排空、红色宕机、紫色维护）。蓝色边框：已分配 GPU。",
"Operators' console": "运维控制台", "Leaf": "叶交换机", "Agent version": "代理版本", "Last heartbeat": "最近心跳",
"Observed generation": "已观测代数", "Set state to %(state)s?": "将状态设置为 %(state)s？", "Leases affected:": "受影响的租约：",
"Reason": "原因", "Confirm": "确认", "Change state": "更改状态", "Review effect": "查看影响", "Model": "型号",
"Release": "释放", "Quarantine": "隔离", "Member ports (desired)": "成员端口（期望）", "Observed": "已观测", "Drift": "偏差",
"In sync": "已同步", "No partitions.": "没有分区。", "Waiting because": "等待原因", "Boost": "提升", "reason": "原因",
"Set": "设置", "Nothing is waiting.": "没有等待中的项目。", "Contract prices": "合同价格", "GPU-h": "GPU 小时",
"warning": "警告", "list prices": "目录价格", "Suspend": "暂停", "Resume": "恢复",
})
# Strings of the console's enrolment approvals (portal/console/enrolments.py).
ZH.update({
"Enrolments": "注册审批", "Enrolments awaiting approval": "待审批的代理注册", "Show all": "全部显示",
"Show pending only": "仅显示待审批", "Host": "主机", "Would replace": "将替换", "last seen": "最近在线",
"Attempts": "尝试次数", "Decision": "决定", "Approve": "批准", "Deny": "拒绝",
"No enrolments waiting.": "没有待审批的注册。", "Enrolment approved.": "注册已批准。", "Enrolment denied.": "注册已拒绝。",
"Each row is a host that presented a valid bootstrap token for a name whose agent is already enrolled. Approving it replaces that agent's identity (its credentials are revoked) when the host next retries; denying it keeps the current agent.": "每一行是一台主机：它出示了有效的引导令牌，但该主机名的代理已经注册。批准后，该主机下次重试时将替换现有代理的身份（其凭据被吊销）；拒绝则保留当前代理。",
})

# MIG orders, waits, devices and invoice lines (issue 28, ADR 0222).
ZH.update({
"Not a MIG profile of %(models)s; one of: %(profiles)s.": "不是 %(models)s 的 MIG 配置；可选：%(profiles)s。",
"A MIG instance is not combined with a time-sliced fraction; leave gpu_milli out.": "MIG 实例不能与时间分片的 GPU 份额组合；请不要填写 gpu_milli。",
"MIG instances are ordered on one node.": "MIG 实例只能在一个节点上订购。",
"Between 1 and %(max)s MIG instances.": "MIG 实例数须在 1 到 %(max)s 之间。",
"No %(models)s GPU of the pool is offered for MIG instances.": "资源池中没有可用于 MIG 实例的 %(models)s GPU。",
"MIG instances start now; leave start_at out.": "MIG 实例立即开始；请不要填写 start_at。",
"No %(models)s GPU of the pool is offered for MIG instances right now (all are whole-GPU only, busy whole or out of service).": "资源池中目前没有可用于 MIG 实例的 %(models)s GPU（均为仅整卡模式、正被整卡使用或已停止服务）。",
"Every %(models)s GPU offered for MIG is full: no free slices at a valid placement for this profile; it starts when instances are released.": "所有可用于 MIG 的 %(models)s GPU 均已占满：此配置在任何有效放置位置都没有空闲切片；有实例释放后即开始。",
"MIG %(profile)s": "MIG %(profile)s",
"MIG devices": "MIG 设备",
"Start slice": "起始切片",
"The MIG device UUIDs appear once the node has created the instances.": "节点创建实例后，这里将显示 MIG 设备的 UUID。",
"%(hours)s instance-hours": "%(hours)s 实例小时",
"MIG instance": "MIG 实例",
"An isolated slice of one GPU (MIG); GPUs per node then counts instances, all on one node.": "一块 GPU 的隔离切片（MIG）；此时“每节点 GPU 数”表示实例数，且全部位于同一节点。",
"No: whole GPUs or a share": "否：整块 GPU 或份额",
"%(profile)s (%(free)s free now)": "%(profile)s（当前空闲 %(free)s 个）",
})

# Membership, invitations, revocation, rate limits (docs/security.md).
ZH.update({
"[gpupool] You are invited to %(tenant)s": "[gpupool] 您受邀加入 %(tenant)s",
"You are invited to join the tenant %(tenant)s as %(role)s. Sign in with this e-mail address and accept within %(days)s days: %(link)s": "您受邀以%(role)s身份加入租户 %(tenant)s。请使用此电子邮件地址登录，并在 %(days)s 天内接受：%(link)s",
"If you did not expect this, ignore this message.": "如果您没有预期收到此邀请，请忽略本邮件。",
"Enter a valid email address.": "请输入有效的电子邮件地址。",
"This invitation is not valid any more (accepted, withdrawn or expired).": "此邀请已失效（已接受、已撤回或已过期）。",
"Invalid or expired invitation.": "邀请无效或已过期。",
"A tenant keeps at least one owner or admin: make someone else an admin first.": "租户必须至少保留一名所有者或管理员：请先将其他人设为管理员。",
"Only platform staff can deactivate users.": "只有平台工作人员可以停用用户。",
"Too many attempts. Wait a minute and try again.": "尝试次数过多。请稍等一分钟后重试。",
"You joined %(tenant)s as %(role)s. Switch to it from the tenant menu when you want to work there.": "您已以%(role)s身份加入 %(tenant)s。需要在该租户中工作时，请从租户菜单切换。",
"An invitation was sent to %(email)s.": "已向 %(email)s 发送邀请。",
"Invitation to %(email)s withdrawn.": "发给 %(email)s 的邀请已撤回。",
"Invitation": "邀请", "Join %(tenant)s": "加入 %(tenant)s",
"%(inviter)s invites you with the role %(role)s.": "%(inviter)s 邀请您担任%(role)s。",
"Accepting does not change the tenant you are working in; switch from the tenant menu when you want to.": "接受邀请不会改变您当前工作的租户；需要时请从租户菜单切换。",
"Accept invitation": "接受邀请", "Invitation not valid": "邀请无效",
"This invitation is not valid any more (accepted, withdrawn or expired). Ask a tenant admin for a new one.": "此邀请已失效（已接受、已撤回或已过期）。请向租户管理员索取新的邀请。",
"We e-mail a link; the person joins when they sign in with that address and accept. Owners, admins and members get a login on the machines of the tenant's leases; viewers do not.": "我们会发送一封带链接的电子邮件；对方使用该地址登录并接受后即可加入。所有者、管理员和成员可以登录租户租约的机器；只读成员不能。",
"Send invitation": "发送邀请", "Open invitations": "未处理的邀请", "Withdraw": "撤回", "No such member.": "没有这个成员。",
"Ask a tenant admin to invite you, then open the link in the e-mail.": "请让租户管理员邀请您，然后打开邮件中的链接。",
})

ZH.update({
"The pool holds %(most)s %(models)s GPUs; this order asks for %(asked)s.": "资源池共有 %(most)s 块 %(models)s GPU；此订单需要 %(asked)s 块。",
"The largest %(models)s node has %(most)s GPUs; this order asks for %(asked)s per node.": "最大的 %(models)s 节点有 %(most)s 块 GPU；此订单每节点需要 %(asked)s 块。",
"The largest NVLink domain has %(most)s GPUs; this order asks for %(asked)s in one.": "最大的 NVLink 域有 %(most)s 块 GPU；此订单需要在同一个域中使用 %(asked)s 块。",
"No node that holds these GPUs has enough CPU.": "拥有这些 GPU 的节点都没有足够的 CPU。",
"No node that holds these GPUs has enough memory.": "拥有这些 GPU 的节点都没有足够的内存。",
"The pool has %(most)s %(models)s nodes that hold this shape; this order asks for %(asked)s.": "资源池中能满足此规格的 %(models)s 节点有 %(most)s 个；此订单需要 %(asked)s 个。",
"No leaf switch holds %(asked)s %(models)s nodes (at most %(most)s); order fewer nodes or drop the required locality.": "没有任何叶交换机下有 %(asked)s 个 %(models)s 节点（最多 %(most)s 个）；请减少节点数或取消必须满足的拓扑位置。",
"Remove selected members (keeps each tenant's last admin)": "移除所选成员（保留每个租户的最后一名管理员）",
"%(message)s (last owner/admin of: %(tenants)s)": "%(message)s（以下租户的最后一名所有者/管理员：%(tenants)s）",
"Not deleted: %(users)s — %(message)s": "未删除：%(users)s — %(message)s",
"Enrolment approved.": "注册已批准。", "Enrolment denied.": "注册已拒绝。", "Done.": "完成。",
"Removed %(member)s.": "已移除 %(member)s。", "any model": "任意型号",
"The agent of %(node)s is %(version)s and cannot run validation; upgrade it to %(first)s or later, then validate again.": "%(node)s 的代理版本为 %(version)s，无法运行验证；请将其升级到 %(first)s 或更高版本，然后重新验证。",
"upgrade the agent": "请升级代理",
})
PLURAL = {"%(n)s link error": ["%(n)s 个链路错误"]}


def esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def fill(path: Path) -> int:
    text = path.read_text()
    missing = 0
    blocks = text.split("\n\n")
    out = []
    for block in blocks:
        m = re.search(r'^msgid ((?:".*"\n?)+)', block, re.M)
        if not m:
            out.append(block)
            continue
        msgid = "".join(re.findall(r'"(.*)"', m.group(1))).replace('\\"', '"')
        if not msgid:  # the header: not fuzzy, with the language set
            block = block.replace("#, fuzzy\n", "").replace('"Language: \\n"',
                                                            '"Language: zh_Hans\\n"')
            out.append(block)
            continue
        if "msgid_plural" in block:
            forms = PLURAL.get(msgid)
            if forms:
                block = re.sub(r'msgstr\[0\] ".*"', f'msgstr[0] "{esc(forms[0])}"', block)
            else:
                missing += 1
        elif msgid in ZH:
            block = re.sub(r'^msgstr ((?:".*"\n?)+)', f'msgstr "{esc(ZH[msgid])}"', block, flags=re.M)
        else:
            missing += 1
            print("untranslated:", msgid, file=sys.stderr)
        block = block.replace("#, fuzzy\n", "")
        out.append(block)
    path.write_text("\n\n".join(out))
    return missing


if __name__ == "__main__":
    po = Path(__file__).parent / "zh_Hans" / "LC_MESSAGES" / "django.po"
    sys.exit(1 if fill(po) else 0)
