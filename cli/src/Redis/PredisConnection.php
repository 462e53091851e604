<?php

namespace CronLock\Cli\Redis;

/** predis/predis: executeRaw(), which flags an error reply through its second argument. */
final class PredisConnection extends Connection
{
    /** @var \Predis\Client */
    private $predis;

    public function client(): string
    {
        return 'predis';
    }

    protected function connect(Dsn $dsn, array $node)
    {
        $params = ['timeout' => self::CONNECT_TIMEOUT, 'read_write_timeout' => self::READ_TIMEOUT];
        if ($dsn->transport === 'unix') {
            $params += ['scheme' => 'unix', 'path' => $node[0]];
        } else {
            $params += ['scheme' => $dsn->transport, 'host' => $node[0], 'port' => $node[1]];
            if ($dsn->transport === 'tls') {
                $params['ssl'] = self::tlsContext($dsn);
            }
        }
        try {
            $this->predis = new \Predis\Client($params);
            $this->predis->connect();
        } catch (\Exception $e) {
            throw new \RuntimeException("cannot connect to Redis at {$this->address}: " . preg_replace('/ \[(?:tcp|tls|unix):[^\]]*\]$/', '', $e->getMessage()));
        }
        if (!$this->sentinel) {
            $this->login($dsn);
        }
    }

    public function command(array $args)
    {
        $error = false;
        try {
            $reply = $this->predis->executeRaw(array_map('strval', $args), $error);
        } catch (\Exception $e) {
            throw new \RuntimeException("Redis at {$this->address}: " . $e->getMessage());
        }
        if ($error) {
            throw new ReplyError((string) $reply);
        }
        return $reply;
    }

    public function close()
    {
        $this->predis->disconnect();
    }
}
