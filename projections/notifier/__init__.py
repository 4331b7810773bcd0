"""The notifier: decisions as CloudEvents at configured webhooks (notifier.py has the flow).

config.py    the webhooks, their filters, auth headers and the retry policy (typed, checked)
notifier.py  the consumer: decisions topic → notifications → per-webhook queues → commits
delivery.py  one webhook's queue: POST in order, backoff with full jitter, dead letters
progress.py  which offsets every webhook is done with: what the group may commit
"""
