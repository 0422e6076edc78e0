from pgfeed.cli import main

raise SystemExit(main())
