<?php

namespace App;

use CronLock\Symfony\Console\LockableTrait;
use CronLock\Symfony\Store\DatabaseStore;
use CronLock\Symfony\Store\FileStore;
use CronLock\Symfony\Store\RedisStore;
use CronLock\Tests\Frameworks\Fixture\Job;
use Symfony\Component\Console\Command\Command;
use Symfony\Component\Console\Input\InputArgument;
use Symfony\Component\Console\Input\InputInterface;
use Symfony\Component\Console\Input\InputOption;
use Symfony\Component\Console\Output\OutputInterface;
use Symfony\Component\Lock\PersistingStoreInterface;

/**
 * `bin/console app:sync <journal> <seconds> [--wait]`: the test job under
 * the command's lock, as a user's cron command would be written with
 * Console's LockableTrait, the store given instead of Console's own.
 */
final class SyncCommand extends Command
{
    use LockableTrait;

    protected static $defaultName = 'app:sync';

    public function __construct(PersistingStoreInterface $store)
    {
        parent::__construct();
        $this->setLockStore($store);
    }

    /** FIXTURE_STORE=file (FIXTURE_DIR), redis (FIXTURE_DSN) or database (FIXTURE_DSN, FIXTURE_DB_USER, FIXTURE_DB_PASSWORD). */
    public static function storeFromEnvironment(): PersistingStoreInterface
    {
        switch (getenv('FIXTURE_STORE')) {
            case 'redis':
                return new RedisStore(getenv('FIXTURE_DSN'), ['prefix' => 'console:', 'initial_ttl' => 3.0, 'auto_renew' => true]);
            case 'database':
                return new DatabaseStore(getenv('FIXTURE_DSN'), ['prefix' => 'console:', 'user' => getenv('FIXTURE_DB_USER'), 'password' => getenv('FIXTURE_DB_PASSWORD')]);
            default:
                return new FileStore(getenv('FIXTURE_DIR'));
        }
    }

    protected function configure(): void
    {
        $this->setDescription('The test job, one run at a time')
            ->addArgument('journal', InputArgument::REQUIRED)
            ->addArgument('seconds', InputArgument::REQUIRED)
            ->addOption('wait', null, InputOption::VALUE_NONE, 'wait for the running one to end');
    }

    protected function execute(InputInterface $input, OutputInterface $output): int
    {
        if (!$this->lock(null, (bool) $input->getOption('wait'))) {
            $output->writeln('The command is already running in another process.');
            return 0;
        }
        try {
            return Job::run($input->getArgument('journal'), 'sync', (float) $input->getArgument('seconds'));
        } finally {
            $this->release();
        }
    }
}
