import sys

from deployment_study.study import main

sys.exit(main())
