"""Putting a team to work: serving tenants, the responses and ratings it keeps, scheduled jobs and their
leases, a LangChain runnable, and backups of the whole database.
"""
