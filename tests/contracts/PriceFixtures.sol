// SPDX-License-Identifier: MIT
// Contracts for the token_price end-to-end tests on anvil: tokens (one
// with the bytes32 name some old tokens use), a Uniswap-V2-style factory
// and pair, a Uniswap-V3-style factory and pool that emit the real events.
// The tests place the factories' code at the real factory addresses
// (anvil_setCode), so the server's default allow-list applies unchanged.
pragma solidity ^0.8.20;

/// A minimal ERC-20: the deployer holds the whole supply.
abstract contract ERC20 {
    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);

    uint8 public decimals;
    uint256 public totalSupply;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    constructor(uint8 decimals_, uint256 supply) {
        decimals = decimals_;
        totalSupply = supply;
        balanceOf[msg.sender] = supply;
        emit Transfer(address(0), msg.sender, supply);
    }

    function transfer(address to, uint256 value) external returns (bool) {
        _move(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        require(allowance[from][msg.sender] >= value, "allowance");
        allowance[from][msg.sender] -= value;
        _move(from, to, value);
        return true;
    }

    function _move(address from, address to, uint256 value) private {
        require(balanceOf[from] >= value, "balance");
        balanceOf[from] -= value;
        balanceOf[to] += value;
        emit Transfer(from, to, value);
    }
}

contract TestToken is ERC20 {
    string public name;

    constructor(string memory name_, uint8 decimals_) ERC20(decimals_, 1e30) {
        name = name_;
    }
}

/// `name()` as bytes32, as MKR and SAI do.
contract Bytes32Token is ERC20 {
    bytes32 public name;

    constructor(bytes32 name_, uint8 decimals_) ERC20(decimals_, 1e30) {
        name = name_;
    }
}

contract TestPair {
    event Sync(uint112 reserve0, uint112 reserve1);

    address public factory;
    address public token0;
    address public token1;

    constructor(address factory_, address token0_, address token1_) {
        factory = factory_;
        token0 = token0_;
        token1 = token1_;
    }

    /// What a swap or a liquidity change ends with: the new reserves.
    function sync(uint112 reserve0, uint112 reserve1) external {
        emit Sync(reserve0, reserve1);
    }
}

contract TestV2Factory {
    event PairCreated(address indexed token0, address indexed token1, address pair, uint256 index);

    mapping(address => mapping(address => address)) public getPair;
    uint256 public pairs;

    function createPair(address tokenA, address tokenB) external returns (address pair) {
        (address token0, address token1) = tokenA < tokenB ? (tokenA, tokenB) : (tokenB, tokenA);
        pair = address(new TestPair(address(this), token0, token1));
        getPair[token0][token1] = pair;
        getPair[token1][token0] = pair;
        pairs += 1;
        emit PairCreated(token0, token1, pair, pairs);
    }
}

contract TestV3Pool {
    event Swap(
        address indexed sender,
        address indexed recipient,
        int256 amount0,
        int256 amount1,
        uint160 sqrtPriceX96,
        uint128 liquidity,
        int24 tick
    );

    address public factory;
    address public token0;
    address public token1;
    uint24 public fee;

    constructor(address factory_, address token0_, address token1_, uint24 fee_) {
        factory = factory_;
        token0 = token0_;
        token1 = token1_;
        fee = fee_;
    }

    /// What a swap ends with: the new price and in-range liquidity.
    function swapTo(uint160 sqrtPriceX96, uint128 liquidity) external {
        emit Swap(msg.sender, msg.sender, 1, -1, sqrtPriceX96, liquidity, 0);
    }
}

contract TestV3Factory {
    mapping(address => mapping(address => mapping(uint24 => address))) public getPool;

    /// Deploys without announcing it (no PoolCreated), so the server meets
    /// the pool first through its Swap and must ask the factory.
    function createPool(address tokenA, address tokenB, uint24 fee) external returns (address pool) {
        (address token0, address token1) = tokenA < tokenB ? (tokenA, tokenB) : (tokenB, tokenA);
        pool = address(new TestV3Pool(address(this), token0, token1, fee));
        getPool[token0][token1][fee] = pool;
        getPool[token1][token0][fee] = pool;
    }
}

/// What the real Uniswap V3 pool (the npm package v3-core) asks of the
/// contract that mints in it or swaps with it.
interface IRealV3Pool {
    function token0() external view returns (address);
    function token1() external view returns (address);
    function mint(address recipient, int24 tickLower, int24 tickUpper, uint128 amount, bytes calldata data)
        external
        returns (uint256 amount0, uint256 amount1);
    function swap(address recipient, bool zeroForOne, int256 amountSpecified, uint160 sqrtPriceLimitX96, bytes calldata data)
        external
        returns (int256 amount0, int256 amount1);
}

interface ITransfer {
    function transfer(address to, uint256 value) external returns (bool);
}

/// Provides liquidity to and swaps in a real Uniswap V3 pool, paying what
/// the pool's callbacks ask from its own balances (fund it first).
contract V3Trader {
    function mint(address pool, int24 tickLower, int24 tickUpper, uint128 amount) external {
        IRealV3Pool(pool).mint(address(this), tickLower, tickUpper, amount, "");
    }

    /// Swaps until the pool's price reaches `sqrtPriceLimitX96` (given
    /// enough `amountSpecified` in).
    function swap(address pool, bool zeroForOne, int256 amountSpecified, uint160 sqrtPriceLimitX96) external {
        IRealV3Pool(pool).swap(address(this), zeroForOne, amountSpecified, sqrtPriceLimitX96, "");
    }

    function uniswapV3MintCallback(uint256 owed0, uint256 owed1, bytes calldata) external {
        pay(msg.sender, owed0, owed1);
    }

    function uniswapV3SwapCallback(int256 delta0, int256 delta1, bytes calldata) external {
        pay(msg.sender, delta0 > 0 ? uint256(delta0) : 0, delta1 > 0 ? uint256(delta1) : 0);
    }

    function pay(address pool, uint256 amount0, uint256 amount1) private {
        if (amount0 > 0) ITransfer(IRealV3Pool(pool).token0()).transfer(pool, amount0);
        if (amount1 > 0) ITransfer(IRealV3Pool(pool).token1()).transfer(pool, amount1);
    }
}
