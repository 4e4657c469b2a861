"""The defences against a bad writer (issue 40): who wrote a memory and the trust policy (``trust``), holding
untrusted writers' memories back (``quarantine``), and distrusting a writer after the fact (``distrust``)."""
