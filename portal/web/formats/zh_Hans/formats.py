"""简体中文: amounts and GPU-hours with a thousands separator (12,345.67), as invoices and
bank statements write them. Django's zh_Hans has none (THOUSAND_SEPARATOR = ""), so large
numbers read as one run of digits (issue 13, finding 8). Dates stay Django's."""

THOUSAND_SEPARATOR = ","
NUMBER_GROUPING = 3
