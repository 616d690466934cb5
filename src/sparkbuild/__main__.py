from sparkbuild.cli import main

raise SystemExit(main())
